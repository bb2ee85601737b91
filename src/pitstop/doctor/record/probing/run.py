"""Running the registered probes (face D, :class:`~pitstop.doctor.analysis.probe.Probe`) in the child.

The mechanism knows no tip: it asks the catalog for every :class:`Probe`, lets each one
say from the plain observations whether it applies, and runs it with a
:class:`ProbeContext`: copies of the user's model (the first one that trained) and of the
last training batch it saw, the live optimizers (to read, never to step), and the timing
helper :meth:`ProbeContext.compare`.

What a probe measures, and what it does not: it times *compute only* -- a forward and
backward (or one ``optimizer.step()``) of copies, on up to the batch's samples, with the
script stopped, so no DataLoader worker competes for the cores and nothing else of the
step runs. Its speed-up is an *estimate* of what the real loop gains; ``pitstop tune``
measures the real loop.

How it times (:mod:`pitstop.doctor.record.probing.parts`): the first call of each variant
(which candidates cannot run here, what a round costs, whether the machine is busy), one more
warm-up call (oneDNN's bf16 kernels need several calls before they reach speed), then timed
*rounds*, each running every variant once, in alternating order (ABBA), at least three rounds
(:data:`pitstop.paired.MIN_PAIRS`) and until every candidate's interval is decided against the
probes' bar (a 10% gain), a probe's ``settle`` rule says the rounds already give the verdict
(bf16 more than 2x slower on a CPU without native bf16: one round), or about ``budget_s``
seconds passed. Each call records wall time, CPU time and the run-queue delay
(:mod:`pitstop.doctor.record.clocks`; CUDA event time on a GPU). :meth:`ProbeContext.compare`
uses the same paired core as ``pitstop tune`` (:mod:`pitstop.paired`): one pair per round (a
burst of load hits both variants of a round), the clock the observed load does not distort, a
90% interval over pairs. Checks gate on the interval's lower bound, not on a fastest-of-n.

Worth its wait: all probes together get half the observed steps' wall time
(:data:`PROBE_SHARE`, at least :data:`PROBE_FLOOR_S` seconds per probe), shared fairly among the
probes that run; a probe whose rounds cannot fit its share is not run (its result says why)
and one that runs out of time before three rounds reports that instead of a verdict.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch

from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.probe_records import ProbeResult, Speedup
from pitstop.doctor.analysis.probe import Probe, ProbeSkip
from pitstop.doctor.record.probing.parts import (EagerCall, ProbeBatch, Settle, contention, first_calls, nbytes_of,
                                               probe_measure, scalar_of, time_variants)
from pitstop.machine import CpuFeatures
from pitstop.stats import median
from pitstop.thresholds import Thresholds

__all__ = ["ProbeBatch", "ProbeContext", "time_variants", "run_probes", "probe_classes", "contention", "probe_measure",
           "MAX_PROBE_BYTES", "PROBE_SAMPLES", "CONFIDENCE", "PROBE_SHARE", "PROBE_FLOOR_S"]

#: parameters larger than this are not deep-copied for a probe (memory), in bytes.
MAX_PROBE_BYTES = 512 * 2**20
#: the fewest samples of the last batch a model probe runs on; more (up to the whole
#: batch) when one forward+backward of them stays cheap (see :meth:`ProbeContext.batch`).
PROBE_SAMPLES = 16
#: confidence of the speed-up intervals (two-sided; the lower bound is a 95% one-sided bound).
CONFIDENCE = 0.90
#: all probes together may take this share of the observed steps' wall time ...
PROBE_SHARE = 0.5
#: ... or at least this many seconds per probe that runs (tiny steps)
PROBE_FLOOR_S = 1.0


class ProbeContext:
    """What a probe may use (in the child, after the script was stopped).

    ``obs`` are the plain observations gathered so far (probes excluded); ``optimizers``
    the live optimizers in the order of ``obs.optimizers`` (read them, never step them).
    """

    def __init__(self, obs: Observations, *, model: torch.nn.Module | None, args: tuple | None,
                 compiled: bool, optimizers: list, budget_s: float = 1.0, kwargs: dict | None = None,
                 batch_dim: int = 0, wrapped: torch.nn.Module | None = None, cpu: CpuFeatures | None = None,
                 deadline: float | None = None) -> None:
        self.obs, self.device, self.budget_s = obs, obs.device, budget_s
        #: what this CPU can do (:func:`pitstop.machine.cpu_features`; injectable)
        self.cpu = cpu
        #: ``time.perf_counter()`` by which the probe in progress must be done (None: no limit)
        self.deadline = deadline
        self._wrapped = wrapped
        self.optimizers = optimizers
        #: the most parameter bytes a probe copies (:data:`MAX_PROBE_BYTES`).
        self.max_bytes = MAX_PROBE_BYTES
        self._model, self._args, self._compiled = model, args, compiled
        self._kwargs, self._dim = dict(kwargs or {}), batch_dim
        self._n: int | None = None

    # -- inputs ----------------------------------------------------------------------
    def model_copy(self, memory_format: torch.memory_format | None = None) -> torch.nn.Module:
        """A deep copy of the trained model in training mode (optionally converted)."""
        if self._model is None:
            raise ProbeSkip("no model with parameters ran a training forward")
        if self._compiled:
            raise ProbeSkip("the model is torch.compile'd; probing it would mean compiling copies")
        if nbytes_of(self._model.parameters()) > self.max_bytes:
            raise ProbeSkip("model too large to copy for a probe")
        # a tensor attribute that autograd produced (llama2.c keeps ``self.last_loss``) cannot be
        # deep-copied: the copy gets it detached
        memo = {id(v): v.detach() for m in self._model.modules() for v in vars(m).values()
                if isinstance(v, torch.Tensor) and v.grad_fn is not None}
        m = copy.deepcopy(self._model, memo).train()
        return m.to(memory_format=memory_format) if memory_format is not None else m

    def compiled_pair(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The live compiled model as the script called it and the same module run eagerly (no
        copies: compiling a copy would take as long as the script's own compile). Time them
        under :meth:`no_recompile`; the batch must be the one they trained on (:meth:`batch`
        with ``whole=True``)."""
        w = self._wrapped
        if not self._compiled or w is None or self._model is None:
            raise ProbeSkip("the model is not torch.compile'd")
        if getattr(w, "_compiled_call_impl", None) is not None:  # model.compile(): the module itself
            return w, EagerCall(w)
        return w, self._model

    @staticmethod
    def no_recompile() -> Any:
        """A context in which a call that would recompile raises instead
        (``torch.compiler.set_stance("fail_on_recompile")``, torch >= 2.6)."""
        stance = getattr(torch.compiler, "set_stance", None)
        if stance is None:
            raise ProbeSkip("torch < 2.6 has no torch.compiler.set_stance to time without recompiling")
        return stance("fail_on_recompile")

    def batch_size(self) -> int | None:
        first = self._first()
        return None if first is None else int(first.shape[self._dim])

    def _first(self) -> torch.Tensor | None:
        from pitstop.doctor.record.batch import primary_input

        found = primary_input(tuple(self._args or ()), self._kwargs)
        return found[1] if found is not None and found[1].dim() > self._dim else None

    def samples(self) -> int:
        """How many samples of the last batch the model probes use: the whole batch when one
        forward+backward of it (measured in the observed steps) fits ``budget_s / 20`` (so
        that warm-up and the rounds fit the budget), else fewer, never below ``PROBE_SAMPLES``."""
        if self._n is None:
            b = self.batch_size() or 0
            per_call = self.obs.seconds("forward") + self.obs.seconds("backward")
            if b and not self._cuttable(b):  # the batch size also sits in another dimension (an RNN's state)
                self._n = b
            elif b and per_call > 0:
                fit = int(b * (self.budget_s / 20) / per_call)
                self._n = max(min(b, PROBE_SAMPLES), min(b, fit))
            else:
                self._n = min(b, PROBE_SAMPLES) if b else 0
        return self._n

    def _cuttable(self, b: int) -> bool:
        """Whether every tensor of the last training forward's arguments that has ``b`` samples
        has them along the batch dimension (else cutting some would break the call: an LSTM's
        ``(h, c)`` holds the batch in dim 1 when the input holds it in dim 0)."""
        def ok(a) -> bool:
            if isinstance(a, torch.Tensor):
                return (a.dim() > self._dim and a.shape[self._dim] == b) or b not in tuple(a.shape)
            if isinstance(a, (tuple, list)):
                return all(ok(x) for x in a)
            if isinstance(a, dict):
                return all(ok(x) for x in a.values())
            return True
        return ok(tuple(self._args or ())) and ok(self._kwargs)

    def batch(self, memory_format: torch.memory_format | None = None, whole: bool = False) -> tuple:
        """The first :meth:`samples` samples (along the batch dimension the doctor inferred)
        of every tensor argument of the last training forward, positional or keyword, that
        shares the batch size (the first positional one optionally converted)."""
        first = self._first()
        if first is None:
            raise ProbeSkip("no training forward with a tensor batch was captured")
        d = self._dim
        b = first.shape[d]
        n = b if whole else self.samples()

        def cut(a):  # detached: an input computed with autograd on (an ODE solver's state) brings no graph along
            if isinstance(a, torch.Tensor):
                if a.dim() > d and a.shape[d] == b and n < b:
                    a = a.narrow(d, 0, n)
                return a.detach().requires_grad_(a.requires_grad) if a.grad_fn is not None else a
            if isinstance(a, (tuple, list)):
                return type(a)(cut(x) for x in a) if type(a) in (tuple, list) else a
            return a
        args = tuple(cut(a) for a in self._args or ())
        kwargs = {k: cut(v) for k, v in self._kwargs.items()}
        if memory_format is not None:
            if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 4:
                raise ProbeSkip("the model's first input is not a 4-D image batch")
            args = (args[0].contiguous(memory_format=memory_format), *args[1:])
        return ProbeBatch(args, kwargs)

    def fwd_bwd(self, model: torch.nn.Module, args: tuple, autocast: torch.dtype | None = None) -> Callable[[], None]:
        """One forward and backward of ``model`` (under autocast of ``autocast`` dtype if given)."""
        device = self.device
        kwargs = getattr(args, "kwargs", {})

        def run() -> None:
            model.zero_grad(set_to_none=True)
            if autocast is None:
                out = model(*args, **kwargs)
            else:
                with torch.autocast(device, dtype=autocast):
                    out = model(*args, **kwargs)
            scalar_of(out).backward()
        run.cost = self.fwd_bwd_cost(args)  # type: ignore[attr-defined]  (read by compare before the first call)
        return run

    def fwd_bwd_cost(self, args: tuple) -> float | None:
        """Seconds one forward+backward on ``args`` should take, from the observed steps (their
        forward and backward time per micro-batch, scaled to the samples): None when unknown."""
        micro = (self.obs.batch.micro_batches_per_step if self.obs.batch else None) or 1.0
        per = (self.obs.seconds("forward") + self.obs.seconds("backward")) / max(micro, 1.0)
        first, b = next((a for a in args if isinstance(a, torch.Tensor)), None), self.batch_size()
        if per <= 0 or first is None or not b or first.dim() <= self._dim:
            return None
        return per * first.shape[self._dim] / b

    def describe(self, model: torch.nn.Module, args: tuple) -> str:
        shapes = ", ".join(["x".join(map(str, a.shape)) for a in args if isinstance(a, torch.Tensor)]
                           + [f"{k}={'x'.join(map(str, v.shape))}" for k, v in getattr(args, "kwargs", {}).items()
                              if isinstance(v, torch.Tensor)])
        b = self.batch_size()
        of = f" ({self.samples()} of the batch's {b} samples)" if b and self.samples() < b else ""
        return f"forward+backward of {type(model).__name__} on {shapes}{of} from the last training batch"

    # -- timing -----------------------------------------------------------------------
    def compare(self, *, what: str, baseline: str, variants: dict[str, Callable[[], Any]],
                keep_threads: bool = False, clock: str | None = None, settle: Settle | None = None,
                warmup: int = 2, **extra: Any) -> ProbeResult:
        """Time ``variants`` (:func:`time_variants`) and compare every candidate with
        ``baseline``. Returns the standard probe result:

        ``what``, ``baseline``, ``seconds`` (median per variant), ``runs`` (rounds),
        ``speedups`` (candidate -> ``ratio``, ``low``, ``high``: median(baseline) /
        median(candidate) with its interval), ``candidate`` (the one with the highest
        lower bound), its ``speedup`` and ``interval`` [low, high], ``confidence``,
        ``compute_only`` (True: see the module docs), plus ``extra``. A candidate whose first
        call raises ``RuntimeError`` is ``unavailable`` (with the error's first line) and not
        timed; with no candidate left the result has only ``unavailable``. Whether the machine
        is busy is decided once, from the first calls, and said once, in ``measure_why``.
        ``keep_threads``: never drop to one thread on a busy machine (compiled code would
        recompile). ``clock="wall"``: decide on wall time whatever the load. ``settle``: a
        rule that may end the rounds early with the verdict they give (``settled`` says why;
        the interval is then the rounds' ratio). ``warmup``: untimed calls per variant, the
        first call included.
        """
        from pitstop.paired import MIN_PAIRS, Pair, decide

        if baseline not in variants or len(variants) < 2:
            raise ValueError("compare needs the baseline and at least one candidate")
        dtype = extra.pop("dtype", None)
        cost = getattr(variants[baseline], "cost", None)  # seconds a call should take (observed steps)
        left = None if self.deadline is None else self.deadline - time.perf_counter()
        rounds = max(1, warmup) + (1 if settle is not None else MIN_PAIRS)
        if cost and left is not None and cost * len(variants) * rounds > left and settle is None:
            raise ProbeSkip(f"not timed: a call should take about {cost:.2f} s (from the observed steps), and "
                            f"{rounds} rounds of {len(variants)} variants would overrun its share of the probes' time "
                            f"({max(left, 0.0):.1f} s; the probes take at most {PROBE_SHARE:.0%} of the observed steps' "
                            "time); `pitstop tune` measures it on the real loop")
        first = first_calls(variants, baseline, self.device)
        unavailable = first.unavailable or None
        if unavailable:
            variants = {k: v for k, v in variants.items() if k not in unavailable}
            if len(variants) < 2:  # nothing to time: what cannot run here is the result
                return ProbeResult(what=what, baseline=baseline, compute_only=True, dtype=dtype,
                                   unavailable=unavailable, extra=extra)
        threads = torch.get_num_threads()
        measure = probe_measure(first.load, threads, clock)
        # a settle rule reads timed rounds only: a first call carries its warm-up (the capped CNN's
        # first calls said bf16 2.2x slower where its rounds say 16x)
        t = self._rounds(variants, baseline, first, measure, threads, keep_threads, settle, warmup)
        settled = settle(t) if settle is not None else None
        rounds = len(t[baseline])
        if rounds < MIN_PAIRS and not settled:
            raise ProbeSkip(f"ran out of time after {rounds} round(s) (the probes take at most "
                            f"{PROBE_SHARE:.0%} of the observed steps' time): no verdict; `pitstop tune` measures it "
                            "on the real loop")
        speedups: dict[str, Speedup] = {}
        for name, xs in t.items():
            if name != baseline:
                d = decide([Pair(b, c) for b, c in zip(t[baseline], xs)], confidence=CONFIDENCE, measure=measure)
                low, high = (d.ratio, d.ratio) if settled else (d.low, d.high)
                speedups[name] = Speedup(ratio=d.ratio, low=low, high=high, decided=bool(settled) or d.status != "undecided",
                                         measure=d.measure.name, measure_why=d.measure.why)
        best = max(speedups, key=lambda k: (speedups[k].low, speedups[k].ratio))
        top = speedups[best]
        seconds = {k: median([x.wall for x in v]) for k, v in t.items()}
        if settled:
            extra = {**extra, "settled": settled}
        return ProbeResult(what=what, baseline=baseline, seconds=seconds,
                           measure=top.measure, measure_why=top.measure_why, runs=rounds,
                           speedups=speedups, candidate=best, speedup=top.ratio, interval=(top.low, top.high),
                           confidence=CONFIDENCE, compute_only=True, dtype=dtype, unavailable=unavailable,
                           extra=extra)


    def _rounds(self, variants, baseline, first, measure, threads, keep_threads, settle, warmup):
        """The timed rounds of :meth:`compare`, when its share of the probes' time holds them."""
        from pitstop.paired import MIN_PAIRS

        per_round = sum(first.seconds.get(k, 0.0) for k in variants)
        rounds_needed = max(0, warmup - 1) + (1 if settle is not None else MIN_PAIRS)
        left = None if self.deadline is None else self.deadline - time.perf_counter()
        if left is not None and per_round * rounds_needed > left and settle is None:  # a settle rule's one round runs
            raise ProbeSkip(f"not timed: a round of its variants took {per_round:.2f} s and {rounds_needed} more would "
                            f"overrun its share of the probes' time ({max(left, 0.0):.1f} s left; the probes take at most "
                            f"{PROBE_SHARE:.0%} of the observed steps' time); `pitstop tune` measures it on the real loop")
        single = measure is not None and measure.name == "cpu" and threads > 1 and not keep_threads
        if single:  # threads spinning at OpenMP barriers while a peer waits for a core distort every clock
            torch.set_num_threads(1)
        try:
            return time_variants(variants, self.device, self.budget_s, warmup=max(0, warmup - 1), baseline=baseline,
                                 measure=measure, margin=Thresholds().probe_speedup - 1, settle=settle,
                                 deadline=self.deadline)
        finally:
            torch.set_num_threads(threads)


def probe_classes() -> list[type[Probe]]:
    from pitstop import catalog

    return sorted((c for c in catalog.implementations("D") if issubclass(c, Probe)), key=lambda c: (c.tip, c.name))


def _probe_seconds(obs: Observations, probes: int) -> float:
    """What all ``probes`` may take together: :data:`PROBE_SHARE` of the observed steps' wall
    time, at least :data:`PROBE_FLOOR_S` each."""
    observed = obs.mean_step * obs.steps_observed
    return max(PROBE_FLOOR_S * probes, PROBE_SHARE * observed)


def run_probes(obs: Observations, *, model: torch.nn.Module | None, args: tuple | None, compiled: bool,
               optimizers: list, budget_s: float = 1.0, kwargs: dict | None = None,
               batch_dim: int = 0, wrapped: torch.nn.Module | None = None,
               cpu: CpuFeatures | None = None) -> dict[str, ProbeResult]:
    """Run every registered probe; each result (or ``skipped`` / ``error``) by its key. Each
    probe that runs gets a fair share of the time left (:func:`_probe_seconds`)."""
    from pitstop.machine import cpu_features

    ctx = ProbeContext(obs, model=model, args=args, compiled=compiled, optimizers=optimizers, budget_s=budget_s,
                       kwargs=kwargs, batch_dim=batch_dim, wrapped=wrapped, cpu=cpu or obs.processor or cpu_features())
    out: dict[str, ProbeResult] = {}
    devices = [torch.cuda.current_device()] if obs.device == "cuda" and torch.cuda.is_initialized() else []
    todo = []
    for cls in probe_classes():
        probe = cls()
        reason = probe.skip_reason(obs)
        if reason:
            out[probe.name] = ProbeResult.skip(reason)
        else:
            todo.append(probe)
    end = time.perf_counter() + _probe_seconds(obs, len(todo))
    for i, probe in enumerate(todo):
        now = time.perf_counter()
        ctx.deadline = now + max(0.0, end - now) / (len(todo) - i)
        try:
            with torch.random.fork_rng(devices=devices):  # the script's RNG state is left as it was
                for key, result in probe.run(ctx):
                    out[key] = result
        except ProbeSkip as exc:
            out.setdefault(probe.name, ProbeResult.skip(str(exc)))
        except Exception as exc:  # a broken probe is reported (diagnose lists it as an error)
            out[probe.name] = ProbeResult.crashed(f"{type(probe).tip} {type(probe).__name__}: {type(exc).__name__}: {exc}")
    return out
