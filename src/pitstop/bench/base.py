"""The bench mechanism's torch-free core (face B): claims, benchmarks, measurements.

A tip module adds its benchmark by subclassing :class:`Benchmark` with ``tip="PITnnn"``::

    class FusionBench(Benchmark, tip="PIT607"):
        title = "x.cos().cos(): eager vs torch.compile"
        claim = Claim(seed="002", text="operator fusion will speed it up by 2x",
                      baseline="eager", candidate="compiled", ratio=2.0)

        def run(self, ctx):            # ctx: pitstop.bench.timing.BenchContext
            import torch               # torch only inside the method
            ...
            return Outcome(workload="...", measurements=ctx.time({"eager": f, "compiled": g}))

The benchmark says *what* to run; the mechanism (``timing``, ``runner``, ``verdict``) times
it, computes the ratio with its interval and gives the verdict. This module must stay
importable without torch: every tip module imports it, and ``pitstop lint`` loads them all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pitstop.bench.verdict import SCOPES
from pitstop.catalog import Face
from pitstop.stats import Summary, summarize

__all__ = ["Benchmark", "BenchSkip", "Claim", "Measurement", "Comparison", "Outcome", "KINDS"]

#: ``speedup``: timings (lower is better); ratio = median(baseline) / median(candidate), so
#: > 1 means the claim's direction. ``exact``: a deterministic quantity (bytes, counts);
#: ratio = the candidate's value per unit of work, compared with the claimed number.
KINDS = ("speedup", "exact")

Names = str | tuple[str, ...]


def _names(x: Names) -> tuple[str, ...]:
    return (x,) if isinstance(x, str) else tuple(x)


@dataclass(frozen=True)
class Claim:
    """What a seed claims, in a form a measurement can confirm or refute.

    ``baseline`` / ``candidate`` name measurements of the benchmark's :class:`Outcome` (a
    tuple pools several, e.g. every size that is a multiple of 8). ``ratio`` is the claimed
    factor (``2.0`` for "2x faster"); ``None`` when the seed claims only a direction
    ("faster", "more efficient"). ``expected`` (exact claims only) maps further measurement
    names to the value the seed claims for them.

    ``scope`` is what the seed's sentence is about: ``"any"`` device (the default), or
    ``"gpu"`` when the seed makes the claim about GPUs (tensor cores, "efficiency of GPU",
    a speed-up quoted for V100s). Off a GPU a ``gpu`` claim is never confirmed or refuted:
    its verdict is capped at "not on this hardware" (``pitstop.bench.verdict``, scope rule),
    its numbers are still measured and shown.
    """

    seed: str
    text: str
    candidate: Names
    baseline: Names = ""
    ratio: float | None = None
    kind: str = "speedup"
    ratio_of: str = ""
    expected: Mapping[str, float] = field(default_factory=dict)
    scope: str = "any"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim kind {self.kind!r} is not one of {KINDS}")
        if self.scope not in SCOPES:
            raise ValueError(f"claim scope {self.scope!r} is not one of {SCOPES}")
        if not self.text.strip() or not self.seed:
            raise ValueError("a claim needs the seed number and its text")
        if self.kind == "speedup" and not self.baseline:
            raise ValueError("a speedup claim needs a baseline measurement")
        if self.kind == "exact" and self.ratio is None:
            raise ValueError("an exact claim needs the claimed value (ratio=)")
        if self.ratio is not None and not (math.isfinite(self.ratio) and self.ratio >= 0):
            raise ValueError(f"claimed ratio must be a finite number >= 0, got {self.ratio!r}")
        if self.kind == "speedup" and self.ratio is not None and self.ratio <= 1:
            raise ValueError(f"a claimed speed-up must be > 1 (baseline / candidate), got {self.ratio!r}")

    @property
    def baseline_names(self) -> tuple[str, ...]:
        return _names(self.baseline) if self.baseline else ()

    @property
    def candidate_names(self) -> tuple[str, ...]:
        return _names(self.candidate)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "text": self.text,
            "kind": self.kind,
            "baseline": list(self.baseline_names),
            "candidate": list(self.candidate_names),
            "claimed_ratio": self.ratio,
            "ratio_of": self.ratio_of,
            "expected": dict(self.expected),
            "scope": self.scope,
        }


@dataclass(frozen=True)
class Measurement:
    """One variant's samples: seconds per call (``unit="s"``) or a deterministic value.

    ``work`` is the amount of work per call (FLOPs, samples, parameter bytes): ratios of
    variants doing different work compare per-unit values, and reports show a rate
    (``work / median`` for timings, ``median / work`` for values). ``info`` marks a
    measurement that is reported but never compared (e.g. compile time). ``rounds`` holds
    the timing round of each sample (empty when the samples were not taken in rounds).
    """

    name: str
    samples: tuple[float, ...]
    unit: str = "s"
    work: float | None = None
    work_unit: str = ""
    note: str = ""
    info: bool = False
    rounds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError(f"measurement {self.name!r} has no samples")
        object.__setattr__(self, "samples", tuple(float(s) for s in self.samples))
        object.__setattr__(self, "rounds", tuple(int(r) for r in self.rounds))
        if self.rounds and len(self.rounds) != len(self.samples):
            raise ValueError(f"measurement {self.name!r}: {len(self.rounds)} round indices for "
                             f"{len(self.samples)} samples")
        if self.work is not None and not self.work > 0:
            raise ValueError(f"measurement {self.name!r}: work must be > 0, got {self.work!r}")

    @property
    def summary(self) -> Summary:
        return summarize(self.samples)

    def per_work(self) -> list[float]:
        """Samples divided by the work per call (the samples themselves without work)."""
        return [s / self.work for s in self.samples] if self.work else list(self.samples)

    def rate(self) -> float | None:
        """Work per second for timings, value per unit of work otherwise; None without work."""
        if not self.work:
            return None
        med = self.summary.median
        if self.unit == "s":
            return self.work / med if med > 0 else math.nan
        return med / self.work

    def rate_unit(self) -> str:
        if not self.work:
            return ""
        return f"{self.work_unit}/s" if self.unit == "s" else f"x {self.work_unit}"

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "name": self.name,
            "unit": self.unit,
            "n": s.n,
            "median": s.median,
            "iqr": s.iqr,
            "min": s.min,
            "max": s.max,
            "work": self.work,
            "work_unit": self.work_unit,
            "rate": self.rate(),
            "rate_unit": self.rate_unit(),
            "info": self.info,
            "note": self.note,
            "samples": list(self.samples),
            "rounds": list(self.rounds),
        }


@dataclass(frozen=True)
class Comparison:
    """A further ratio the benchmark reports beside its claim (no verdict), e.g. fused vs
    for-loop when the seed's claim is about foreach."""

    baseline: Names
    candidate: Names
    label: str

    @property
    def baseline_names(self) -> tuple[str, ...]:
        return _names(self.baseline)

    @property
    def candidate_names(self) -> tuple[str, ...]:
        return _names(self.candidate)


@dataclass
class Outcome:
    """What a benchmark's ``run`` returns: its measurements and the facts it checked.

    ``checks`` are yes/no facts the claim presupposes (e.g. "from_numpy shares memory"):
    any False one refutes the claim. ``notes`` are short sentences shown with the result.
    """

    workload: str
    measurements: list[Measurement]
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    def by_name(self) -> dict[str, Measurement]:
        out: dict[str, Measurement] = {}
        for m in self.measurements:
            if m.name in out:
                raise ValueError(f"two measurements named {m.name!r}")
            out[m.name] = m
        return out


class BenchSkip(Exception):
    """Raised by a benchmark that cannot run here; the message is the reason shown."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Benchmark(Face, face="B"):
    """Base of every benchmark (face B). Subclass it in the tip module with ``tip=``.

    Class attributes: ``claim`` (a :class:`Claim`), ``title`` (what is measured, one line),
    ``gpu_only`` (skipped on a run without CUDA, with ``gpu_why`` added to the reason) and
    ``compiles`` (uses ``torch.compile``: its first call takes seconds to tens of seconds).
    """

    claim: ClassVar[Claim]
    title: ClassVar[str]
    gpu_only: ClassVar[bool] = False
    gpu_why: ClassVar[str] = ""
    compiles: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: Any) -> None:
        if kw.get("tip"):  # validate before Face registers it: a broken benchmark never lands in the registry
            name = f"{cls.__module__}.{cls.__qualname__}"
            if not isinstance(getattr(cls, "claim", None), Claim):
                raise TypeError(f"{name}: a benchmark needs a `claim = Claim(...)`")
            if not getattr(cls, "title", "").strip():
                raise TypeError(f"{name}: a benchmark needs a one-line `title`")
            if cls.run is Benchmark.run:
                raise TypeError(f"{name}: a benchmark must implement run(self, ctx)")
        super().__init_subclass__(**kw)

    def run(self, ctx: Any) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError
