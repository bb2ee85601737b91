"""Timing for benchmarks: ``torch.utils.benchmark.Timer``, interleaved rounds, sizes per mode.

Each variant is warmed up, then timed in rounds; in every round each variant gets one
``Timer.blocked_autorange`` (the Timer picks the block size, synchronizes the accelerator
around each block and sets the thread count), and the order of the variants rotates from
round to round, so a burst of load from another process hits every variant rather than
one. The per-call time of every block is a sample, tagged with its round; the runner computes
medians, IQRs and a ratio interval that resamples whole rounds (``pitstop.stats.round_ratio_interval``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pitstop.bench.base import BenchSkip, Measurement

__all__ = ["MODES", "Mode", "BenchConfig", "BenchContext"]

T = TypeVar("T")


@dataclass(frozen=True)
class Mode:
    """How hard to measure. Every variant gets ``rounds`` rounds of one ``blocked_autorange``
    (``min_run_time`` seconds) after ``warmup`` calls; slow variants (one call per block) get
    more rounds until each has ``min_samples`` samples or ``budget`` seconds are spent."""

    name: str
    rounds: int
    min_run_time: float
    warmup: int
    min_samples: int
    budget: float


#: ``tiny`` is for the test suite, ``quick`` for ``--quick``, ``full`` the default.
MODES: dict[str, Mode] = {
    "tiny": Mode("tiny", rounds=2, min_run_time=0.005, warmup=1, min_samples=2, budget=1.0),
    "quick": Mode("quick", rounds=3, min_run_time=0.03, warmup=1, min_samples=6, budget=4.0),
    "full": Mode("full", rounds=7, min_run_time=0.25, warmup=3, min_samples=15, budget=40.0),
}

#: At most this many samples per round (consecutive blocks are averaged into one).
_MAX_SAMPLES_PER_ROUND = 10


@dataclass(frozen=True)
class BenchConfig:
    """Parsed once at the CLI edge and passed down. ``device=None`` picks cuda if present.
    ``threads`` is the intra-op thread count while measuring: 1 by default, like
    ``torch.utils.benchmark.Timer``, because single-threaded ratios are far more stable on a
    shared machine; pass the core count to see multi-threaded speed."""

    mode: str = "full"
    device: str | None = None
    threads: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")


def _chunk_means(xs: list[float], k: int) -> list[float]:
    """Average consecutive elements into at most ``k`` groups (bigger blocks, same total)."""
    if len(xs) <= k:
        return list(xs)
    size = -(-len(xs) // k)
    return [sum(xs[i:i + size]) / len(xs[i:i + size]) for i in range(0, len(xs), size)]


class BenchContext:
    """What a benchmark's ``run(ctx)`` gets: the device, the mode, and timing helpers."""

    def __init__(self, device: str, mode: str = "full", threads: int = 1):
        self.device = device
        self.mode = MODES[mode]
        self.threads = threads

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
    def time(self, variants: Mapping[str, Callable[[], Any]], *, work: Mapping[str, float] | float | None = None,
             work_unit: str = "", notes: Mapping[str, str] | None = None) -> list[Measurement]:
        """Time each zero-argument callable; return one :class:`Measurement` per variant
        (seconds per call). ``work`` (per variant or shared) turns times into rates."""
        from torch.utils.benchmark import Timer

        names = list(variants)
        if not names:
            raise ValueError("nothing to time")
        for name in names:
            for _ in range(self.mode.warmup):
                variants[name]()
        self.sync()
        samples: dict[str, list[float]] = {n: [] for n in names}
        rounds: dict[str, list[int]] = {n: [] for n in names}
        t0 = time.perf_counter()
        r = 0
        while r < self.mode.rounds or (min(map(len, samples.values())) < self.mode.min_samples
                                       and time.perf_counter() - t0 < self.mode.budget):
            k = r % len(names)
            r += 1
            for name in names[k:] + names[:k]:
                timer = Timer(stmt="fn()", globals={"fn": variants[name]}, num_threads=self.threads, label=name)
                m = timer.blocked_autorange(min_run_time=self.mode.min_run_time)
                chunk = _chunk_means(list(m.times), _MAX_SAMPLES_PER_ROUND)
                samples[name].extend(chunk)
                rounds[name].extend([r - 1] * len(chunk))
        out = []
        for name in names:
            w = work.get(name) if isinstance(work, Mapping) else work
            out.append(Measurement(name, tuple(samples[name]), unit="s", work=w, work_unit=work_unit if w else "",
                                   note=(notes or {}).get(name, ""), rounds=tuple(rounds[name])))
        return out

    def first_call(self, fn: Callable[[], Any]) -> float:
        """Wall time of one call, synchronized (e.g. the compiling first call)."""
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t0

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
