"""The parts a doctor probe run is made of (in the child, after the script was stopped).

What it feeds its copies: the batch (:class:`ProbeBatch`), a model output reduced to a scalar
to back-propagate (:func:`scalar_of`), a compiled module called eagerly (:class:`EagerCall`),
the bytes a model's parameters take (:func:`nbytes_of`).

How it times them: :func:`first_calls`, the first call of every variant, timed, with the
contention it saw (the run-queue delay of this process's threads per CPU second): it tells which
candidates cannot run here (a ``RuntimeError``), what one round will cost, and whether the
machine is busy, in one round instead of three. :func:`time_variants`: the timed rounds, each
running every variant once in alternating order (ABBA), at least ``min_reps`` rounds and until
every candidate's interval decided (:func:`pitstop.paired.decide` against the probes' bar), a
``settle`` rule says the rounds so far already give the verdict (the hardware's answer), about
``budget_s`` seconds passed, or the probes' ``deadline`` came. :func:`probe_measure`: the one
decision about the machine's load for a probe, said once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from pitstop.doctor.analysis.probe import ProbeSkip

__all__ = ["time_variants", "first_calls", "FirstCalls", "contention", "probe_measure", "Settle", "ProbeBatch",
           "EagerCall", "scalar_of", "nbytes_of"]

#: a rule that reads the rounds so far (variant -> its samples) and returns why they already
#: settle the verdict, or None to go on
Settle = Callable[[dict[str, list[Any]]], "str | None"]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@dataclass
class FirstCalls:
    """The first call of each variant: ``seconds`` (wall) by variant, ``unavailable`` (name ->
    the first line of the ``RuntimeError`` it raised), ``load`` (run-queue delay per CPU second
    over the calls; None where the system has no such clocks)."""

    seconds: dict[str, float]
    unavailable: dict[str, str]
    load: float | None


def first_calls(variants: dict[str, Callable[[], Any]], baseline: str, device: str) -> FirstCalls:
    """Call every variant once (the baseline first; its errors propagate). A candidate whose
    call raises ``RuntimeError`` (an operator with no kernel for this dtype or layout on this
    device, e.g. oneDNN's bf16 LSTM on a CPU without native bf16) is unavailable."""
    from pitstop.doctor.record.clocks import StepClocks

    clocks = StepClocks()
    if clocks.available and device == "cpu":
        clocks.mark()
    c0 = time.process_time()
    seconds: dict[str, float] = {}
    unavailable: dict[str, str] = {}
    for name in [baseline, *(k for k in variants if k != baseline)]:
        t0 = time.perf_counter()
        if name == baseline:
            variants[name]()
        else:
            try:
                variants[name]()
            except RuntimeError as exc:
                first = (str(exc).strip().splitlines() or [""])[0].strip()
                unavailable[name] = f"{type(exc).__name__}: {first[:200]}"
                continue
        _sync(device)
        seconds[name] = time.perf_counter() - t0
    load = None
    if clocks.available and device == "cpu":
        cpu = time.process_time() - c0
        load = (clocks.lap().get("run_delay") or 0.0) / cpu if cpu > 0 else None
    return FirstCalls(seconds, unavailable, load)


def time_variants(variants: dict[str, Callable[[], Any]], device: str, budget_s: float = 1.0,
                  min_reps: int | None = None, max_reps: int = 60, warmup: int = 2, baseline: str | None = None,
                  margin: float = 0.05, measure: Any = None, settle: Settle | None = None,
                  deadline: float | None = None) -> dict[str, list[Any]]:
    """One :class:`pitstop.paired.Sample` per variant per round (wall, CPU time, run-queue
    delay; CUDA event time on a GPU); rounds alternate the order (ABBA), so ``result[name][i]``
    of every name pair up. With ``baseline`` given, rounds stop early -- after ``min_reps``
    (default :data:`pitstop.paired.MIN_PAIRS`) -- once every candidate's paired interval decided
    against ``1 + margin`` (:func:`pitstop.paired.decide`, on ``measure`` when given). ``settle``
    is asked after every round, the first included; ``deadline`` (a ``time.perf_counter()``
    value) ends the rounds whatever they decided."""
    from pitstop.doctor.record.clocks import StepClocks
    from pitstop.paired import MIN_PAIRS, Pair, Sample, decide

    min_reps = MIN_PAIRS if min_reps is None else min_reps
    names = list(variants)
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    _sync(device)
    clocks = StepClocks()
    cuda = device == "cuda"
    samples: dict[str, list[Sample]] = {k: [] for k in names}
    start = time.perf_counter()
    reps = 0
    while reps < max_reps and (reps < min_reps or time.perf_counter() - start < budget_s):
        for name in (names if reps % 2 == 0 else names[::-1]):
            if cuda:
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record()
            clocks.mark()
            t0, c0 = time.perf_counter(), time.process_time()
            variants[name]()
            if cuda:
                ev1.record()
            _sync(device)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            lap = clocks.lap()
            samples[name].append(Sample(wall=wall, cpu=cpu + lap.get("cpu_children", 0.0),
                                        run_delay=lap.get("run_delay"), active=lap.get("main_active"),
                                        gpu=ev0.elapsed_time(ev1) / 1e3 if cuda else None))
        reps += 1
        if settle is not None and settle(samples):
            break
        if deadline is not None and time.perf_counter() >= deadline:
            break
        if baseline is not None and reps >= min_reps and all(
                (d := decide([Pair(b, c) for b, c in zip(samples[baseline], samples[k])], margin=margin,
                              measure=measure)) is not None
                and d.status != "undecided" for k in names if k != baseline):
            break
    return samples


def contention(variants: dict[str, Callable[[], Any]]) -> float | None:
    """One call of each variant: how long this process's threads waited for cores (run-queue
    delay) per CPU second; None where the system has no such clocks."""
    from pitstop.doctor.record.clocks import StepClocks

    clocks = StepClocks()
    if not clocks.available:
        return None
    clocks.mark()
    c0 = time.process_time()
    for fn in variants.values():
        fn()
    lap = clocks.lap()
    cpu = time.process_time() - c0
    return (lap.get("run_delay") or 0.0) / cpu if cpu > 0 else None


def probe_measure(load: float | None, threads: int, clock: str | None = None) -> Any:
    """The one decision about the machine's load for a probe run, said once: wall time when
    it is quiet; when busy (threads waited for cores more than
    :data:`pitstop.paired.CONTENTION` of their CPU time) one thread, on CPU time. None (the
    paired core chooses) where the system has no run-queue clocks. ``clock="wall"``: wall
    time whatever the load (the candidate changes how many cores work: CPU time cannot credit
    that)."""
    from pitstop.paired import CONTENTION, Measure

    if clock == "wall":
        seen = f" (threads waited {load:.0%} of their CPU time for a core)" if load is not None else ""
        return Measure("wall", f"wall time: the candidate changes how many threads work, which CPU time cannot "
                               f"credit{seen}", load)
    if load is None:
        return None
    if load < CONTENTION:
        return Measure("wall", f"wall time: the machine is quiet (threads waited {load:.0%} of their CPU time for a "
                               "core)", load)
    how = f"timed with one thread instead of {threads}" if threads > 1 else "timed"
    return Measure("cpu", f"CPU time: the machine is busy (threads waited {load:.0%} of their CPU time for a core): "
                          f"{how}, on CPU time, which other processes distort least", load)


def scalar_of(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out.float().mean()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                return o.float().mean()
    raise ProbeSkip(f"cannot reduce a model output of type {type(out).__name__} to a scalar")


def nbytes_of(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class ProbeBatch(tuple):
    """The positional arguments of a probe's model call, with its keyword ones in ``kwargs``."""

    kwargs: dict[str, Any]

    def __new__(cls, args, kwargs=None):
        self = super().__new__(cls, args)
        self.kwargs = dict(kwargs or {})
        return self


class EagerCall(torch.nn.Module):
    """A ``model.compile()``'d module called past its compiled path (``_call_impl``)."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module._call_impl(*args, **kwargs)
