"""Timing for benchmarks: warm up once, then interleaved rounds sized to a time budget,
stopped as soon as the claim's verdict is decided.

Each variant is called ``warmup`` times (once by default), and that call's time is the first
estimate of its cost. Then come rounds: in every round each variant runs ``samples`` blocks of
calls, the order of the variants rotating from round to round (a burst of load from another
process hits every variant rather than one). The number of calls in a block is sized from the
time per call seen so far so that ``max_rounds`` rounds would fill the benchmark's budget; a
variant slower than its share runs one call per block. Every block is synchronized on the
accelerator at both ends and timed with ``clock`` (``time.perf_counter``); its time per call is a
sample, tagged with its round, and the runner computes medians, IQRs and a ratio interval that
resamples whole rounds (``pitstop.stats.round_ratio_interval``).

When to stop (checked after every round): after ``max_rounds``; or, once ``min_rounds`` are
done, as soon as the runner's ``settled`` predicate says the samples so far already decide the
claim's verdict (``pitstop.bench.verdict.settled``), or when another round would overrun the
budget. The reason is recorded (:class:`TimingLog`) and shown with the result.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pitstop.bench.base import BenchSkip, Measurement

__all__ = ["MODES", "Mode", "BenchConfig", "BenchContext", "TimingLog", "benchmark_budget"]

T = TypeVar("T")
Clock = Callable[[], float]
Settled = Callable[[Sequence[Measurement]], bool]


@dataclass(frozen=True)
class Mode:
    """How hard to measure: ``warmup`` calls per variant, then between ``min_rounds`` and
    ``max_rounds`` rounds of ``samples`` blocks per variant, inside ``budget`` seconds per
    benchmark; ``run_budget`` is the target for a whole run (``None``: no target), which
    shrinks a benchmark's budget, never below ``budget * floor``, when earlier ones ran long."""

    name: str
    min_rounds: int
    max_rounds: int
    samples: int
    budget: float
    run_budget: float | None
    warmup: int = 1
    floor: float = 0.25

    def __post_init__(self) -> None:
        if not 1 <= self.min_rounds <= self.max_rounds or self.samples < 1 or self.warmup < 0:
            raise ValueError(f"inconsistent mode {self!r}")
        if not self.budget > 0 or (self.run_budget is not None and not self.run_budget > 0):
            raise ValueError(f"mode {self.name!r}: budgets must be > 0")


#: ``tiny`` is for the test suite, ``quick`` for ``--quick``, ``full`` the default.
MODES: dict[str, Mode] = {
    "tiny": Mode("tiny", min_rounds=2, max_rounds=3, samples=2, budget=0.3, run_budget=None),
    "quick": Mode("quick", min_rounds=3, max_rounds=6, samples=3, budget=2.0, run_budget=30.0),
    "full": Mode("full", min_rounds=5, max_rounds=12, samples=3, budget=8.0, run_budget=60.0),
}

#: At most this many calls in one block (a call of a few microseconds would ask for more).
_MAX_CALLS = 100_000


@dataclass(frozen=True)
class BenchConfig:
    """Parsed once at the CLI edge and passed down. ``device=None`` picks cuda if present.
    ``threads`` is the intra-op thread count while measuring: 1 by default, like
    ``torch.utils.benchmark.Timer``, because single-threaded ratios are far more stable on a
    shared machine; pass the core count to see multi-threaded speed. ``budget``: seconds for
    the whole run (``None``: the mode's ``run_budget``)."""

    mode: str = "full"
    device: str | None = None
    threads: int = 1
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget!r}")

    @property
    def run_budget(self) -> float | None:
        return self.budget if self.budget is not None else MODES[self.mode].run_budget


def benchmark_budget(mode: Mode, run_budget: float | None, elapsed: float, left: int) -> float:
    """Seconds of timing for the next benchmark: the mode's ``budget``, shrunk to a fair share
    of what is left of ``run_budget`` over the ``left`` benchmarks still to run (this one
    included), never below ``budget * floor``."""
    if run_budget is None or left < 1:
        return mode.budget
    share = (run_budget - elapsed) / left
    return max(mode.budget * mode.floor, min(mode.budget, share))


@dataclass
class TimingLog:
    """How one ``ctx.time`` call went: rounds run, seconds spent (warm-up included), why it stopped."""

    rounds: int = 0
    seconds: float = 0.0
    budget: float = 0.0
    stopped: str = ""

    def note(self) -> str:
        return (f"timed in {self.rounds} round(s), {self.seconds:.1f} s of a {self.budget:.1f} s budget: "
                f"stopped {self.stopped}")


class BenchContext:
    """What a benchmark's ``run(ctx)`` gets: the device, the mode, and timing helpers.

    ``budget`` (seconds, default the mode's) and ``settled`` (does this list of measurements
    already decide the verdict? default: never) are set per benchmark by the runner
    (:meth:`bound`); ``clock`` is the timer (tests pass a fake one)."""

    def __init__(self, device: str, mode: str = "full", threads: int = 1, *, budget: float | None = None,
                 settled: Settled | None = None, clock: Clock = time.perf_counter):
        self.device = device
        self.mode = MODES[mode] if isinstance(mode, str) else mode
        self.threads = threads
        self.budget = self.mode.budget if budget is None else budget
        self.settled = settled
        self.clock = clock
        self.log: list[TimingLog] = []

    def bound(self, budget: float, settled: Settled | None) -> BenchContext:
        """A context for one benchmark: its budget and its verdict predicate, a fresh log."""
        return BenchContext(self.device, self.mode, self.threads, budget=budget, settled=settled, clock=self.clock)

    # -- sizes -----------------------------------------------------------------------
    @property
    def quick(self) -> bool:
        return self.mode.name != "full"

    def size(self, *, tiny: T, quick: T, full: T) -> T:
        """Pick a problem size by mode."""
        return {"tiny": tiny, "quick": quick, "full": full}[self.mode.name]

    @property
    def cpu_flags(self) -> list[str]:
        """CPU flags that matter for low precision (``amx_bf16``, ``avx512_fp16``, ...)."""
        from pitstop.bench.device import cpu_flags

        return cpu_flags()

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    # -- timing ----------------------------------------------------------------------
    def _block(self, fn: Callable[[], Any], calls: int) -> float:
        """Seconds per call of ``calls`` back-to-back calls, synchronized at both ends, GC paused."""
        self.sync()
        enabled = gc.isenabled()
        gc.disable()
        try:
            t0 = self.clock()
            for _ in range(calls):
                fn()
            self.sync()
            return (self.clock() - t0) / calls
        finally:
            if enabled:
                gc.enable()

    def time(self, variants: Mapping[str, Callable[[], Any]], *, work: Mapping[str, float] | float | None = None,
             work_unit: str = "", notes: Mapping[str, str] | None = None) -> list[Measurement]:
        """Time each zero-argument callable; return one :class:`Measurement` per variant
        (seconds per call). ``work`` (per variant or shared) turns times into rates."""
        names = list(variants)
        if not names:
            raise ValueError("nothing to time")
        mode, log = self.mode, TimingLog(budget=self.budget)
        t0 = self.clock()
        per_call = {}
        for name in names:
            for _ in range(max(1, mode.warmup)):
                per_call[name] = self._block(variants[name], 1)
        samples: dict[str, list[float]] = {n: [] for n in names}
        rounds: dict[str, list[int]] = {n: [] for n in names}

        def measured() -> list[Measurement]:
            out = []
            for name in names:
                w = work.get(name) if isinstance(work, Mapping) else work
                out.append(Measurement(name, tuple(samples[name]), unit="s", work=w,
                                       work_unit=work_unit if w else "", note=(notes or {}).get(name, ""),
                                       rounds=tuple(rounds[name])))
            return out

        share = self.budget / (mode.max_rounds * len(names))  # one variant's time in one round
        while True:
            r = log.rounds
            round_start = self.clock()
            for name in names[r % len(names):] + names[:r % len(names)]:
                cost = max(per_call[name], 1e-9)
                blocks = max(1, min(mode.samples, int(share / cost)))
                calls = max(1, min(_MAX_CALLS, int(share / blocks / cost)))
                for _ in range(blocks):
                    samples[name].append(self._block(variants[name], calls))
                    rounds[name].append(r)
                per_call[name] = sorted(samples[name][-blocks:])[blocks // 2]
            log.rounds += 1
            now = self.clock()
            if log.rounds >= mode.max_rounds:
                log.stopped = f"after the most rounds this mode runs ({mode.max_rounds})"
                break
            if log.rounds >= mode.min_rounds:
                if self.settled is not None and self.settled(measured()):
                    log.stopped = "as soon as the samples decided the verdict"
                    break
                if now - t0 + (now - round_start) > self.budget:
                    log.stopped = "at the budget (another round would overrun it)"
                    break
        log.seconds = self.clock() - t0
        self.log.append(log)
        return measured()

    def first_call(self, fn: Callable[[], Any]) -> float:
        """Wall time of one call, synchronized (e.g. the compiling first call)."""
        self.sync()
        t0 = self.clock()
        fn()
        self.sync()
        return self.clock() - t0

    def compile(self, fn: Callable[..., Any], call: Callable[[Callable[..., Any]], Any], **kw: Any
                ) -> tuple[Callable[..., Any], Measurement]:
        """``torch.compile(fn, **kw)`` and run ``call(compiled)`` once: returns the compiled
        function and its compile time (the first call) as an info measurement. A compiler
        that fails here (no C++ toolchain, unsupported platform) skips the benchmark."""
        import torch

        try:
            with warnings.catch_warnings():  # Dynamo's own use of a deprecated torch.jit API, not the user's
                warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*", category=DeprecationWarning)
                compiled = torch.compile(fn, **kw)
                seconds = self.first_call(lambda: call(compiled))
        except Exception as exc:  # noqa: BLE001 - any backend failure means "cannot compile here"
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise BenchSkip(f"torch.compile failed on this machine ({type(exc).__name__}: {first})") from exc
        note = ("first call: tracing and code generation; includes Inductor's start-up when it is the first "
                "compile in this process, and is much shorter when Inductor's on-disk cache is warm")
        return compiled, Measurement("compile (first call)", (seconds,), unit="s", note=note, info=True)
