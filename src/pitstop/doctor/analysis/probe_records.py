"""What a doctor probe measured: :class:`ProbeResult`, its :class:`Speedup` per candidate and
the :class:`Gain` a check reads (torch-free; JSON through :mod:`pitstop.jsoncodec`, as the
other records of :mod:`pitstop.doctor.analysis.records`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pitstop.jsoncodec import FLATTEN, OMIT_NONE
from pitstop.machine import HardwareNote

__all__ = ["Speedup", "Gain", "ProbeResult"]


@dataclass(frozen=True)
class Speedup:
    """A candidate's speed-up over the probe's baseline: median ratio and its interval."""

    ratio: float
    low: float
    high: float
    decided: bool | None = field(default=None, metadata=OMIT_NONE)
    measure: str | None = field(default=None, metadata=OMIT_NONE)
    measure_why: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Gain:
    """:meth:`ProbeResult.gain`: one candidate's speed-up with the probe's confidence and rounds."""

    candidate: str
    ratio: float
    low: float
    high: float
    confidence: float | None = None
    runs: int | None = None

    def text(self) -> str:
        """``1.72x (90% interval 1.41x-2.05x over 12 rounds)``."""
        conf = f"{100 * self.confidence:.0f}% " if self.confidence else ""
        runs = f" over {self.runs} rounds" if self.runs else ""
        return f"{self.ratio:.2f}x ({conf}interval {self.low:.2f}x-{self.high:.2f}x{runs})"


@dataclass(frozen=True)
class ProbeResult:
    """One probe's result (:meth:`pitstop.doctor.record.probing.run.ProbeContext.compare`): ``seconds``
    median per variant, ``speedups`` per candidate, the best ``candidate`` with its
    ``speedup`` and ``interval``; or only ``skipped`` (why it did not run) or ``error`` (it
    crashed). ``dtype``: the precision probe's candidate dtype; ``extra``: anything else a
    probe added (written beside the other keys). ``unavailable``: candidates that cannot run
    on this model here (name -> the error their first call raised, one line: a measured fact,
    e.g. oneDNN has no bf16 LSTM on this CPU), left out of the timing; ``hardware``: why the
    hardware explains a large slowdown measured (:class:`pitstop.machine.HardwareNote`)."""

    what: str | None = field(default=None, metadata=OMIT_NONE)
    baseline: str | None = field(default=None, metadata=OMIT_NONE)
    seconds: dict[str, float] | None = field(default=None, metadata=OMIT_NONE)
    measure: str | None = field(default=None, metadata=OMIT_NONE)
    measure_why: str | None = field(default=None, metadata=OMIT_NONE)
    runs: int | None = field(default=None, metadata=OMIT_NONE)
    speedups: dict[str, Speedup] | None = field(default=None, metadata=OMIT_NONE)
    candidate: str | None = field(default=None, metadata=OMIT_NONE)
    speedup: float | None = field(default=None, metadata=OMIT_NONE)
    interval: tuple[float, float] | None = field(default=None, metadata=OMIT_NONE)
    confidence: float | None = field(default=None, metadata=OMIT_NONE)
    compute_only: bool | None = field(default=None, metadata=OMIT_NONE)
    dtype: str | None = field(default=None, metadata=OMIT_NONE)
    unavailable: dict[str, str] | None = field(default=None, metadata=OMIT_NONE)
    hardware: HardwareNote | None = field(default=None, metadata=OMIT_NONE)
    extra: dict[str, Any] = field(default_factory=dict, metadata=FLATTEN)
    skipped: str | None = field(default=None, metadata=OMIT_NONE)
    error: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def skip(cls, reason: str) -> ProbeResult:
        return cls(skipped=reason)

    @classmethod
    def crashed(cls, message: str) -> ProbeResult:
        return cls(error=message)

    def gain(self, candidate: str | None = None) -> Gain | None:
        """The speed-up of ``candidate`` (default: the best one) over the baseline; None when
        the probe was skipped, crashed or has no such candidate."""
        name = candidate or self.candidate
        s = (self.speedups or {}).get(name) if name else None
        if s is None:
            return None
        return Gain(candidate=name, ratio=s.ratio, low=s.low, high=s.high, confidence=self.confidence, runs=self.runs)
