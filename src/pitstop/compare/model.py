"""The typed data of ``pitstop compare`` (torch-free, frozen): what one side holds, one delta,
and the whole comparison. JSON through :mod:`pitstop.jsoncodec`.

Times are seconds. A *per-step* quantity (the step, a phase, an operator, a kernel) is kept as
its samples, one value per observed step, so the verdict can weigh the change against the
step-to-step noise; a quantity known only as a mean per step has ``samples`` of length one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pitstop.jsoncodec import to_json

__all__ = ["CompareInputError", "Side", "Delta", "Comparison", "SLOWER", "FASTER", "SAME", "ONLY_A", "ONLY_B", "NO_SAMPLES"]

class CompareInputError(ValueError):
    """An input that cannot be compared: unreadable, of no known kind, or without steps."""


SLOWER, FASTER, SAME = "slower", "faster", "no change (within noise)"
ONLY_A, ONLY_B = "gone in B", "new in B"
NO_SAMPLES = "changed (too few steps to weigh noise)"


@dataclass(frozen=True)
class Side:
    """One of the two inputs, read into per-step samples.

    ``kind`` is ``"doctor"`` (a ``pitstop doctor --format json`` report) or ``"trace"`` (a
    profiler trace, one file or a folder of per-rank files). ``device`` names the hardware
    (the doctor's device name, or the trace's ``deviceProperties`` names joined). ``phases``,
    ``operators`` and ``kernels`` map a name to its seconds in each observed step.
    """

    kind: str
    path: str
    device: str
    steps: tuple[float, ...]
    phases: dict[str, tuple[float, ...]] = field(default_factory=dict)
    operators: dict[str, tuple[float, ...]] = field(default_factory=dict)
    kernels: dict[str, tuple[float, ...]] = field(default_factory=dict)
    label: str = ""
    ranks: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Delta:
    """One quantity in A and in B: medians per step, ``ratio`` = B / A with its interval
    (``low``, ``high``; equal to ``ratio`` when the samples cannot give one) and the verdict."""

    group: str
    name: str
    a: float | None
    b: float | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    share_a: float | None = None
    share_b: float | None = None

    @property
    def change(self) -> float | None:
        """Relative change of B against A (0.25 = 25% slower); None when one side lacks it."""
        return None if self.ratio is None else self.ratio - 1.0


@dataclass(frozen=True)
class Comparison:
    """A against B: the step, then phases, operators and kernels (largest change first).

    ``fail_over`` is the ``--fail-over`` percentage (None: not asked); ``failed`` whether the
    step got slower than that, beyond noise. ``notes`` say what makes the pair unlike (other
    GPUs, other batch sizes, other scripts).
    """

    kind: str
    a: Side
    b: Side
    step: Delta
    phases: tuple[Delta, ...]
    operators: tuple[Delta, ...]
    kernels: tuple[Delta, ...]
    confidence: float
    min_change: float
    notes: tuple[str, ...] = ()
    fail_over: float | None = None
    failed: bool = False

    def to_dict(self) -> dict:
        out = {"schema": 1, "kind": self.kind}
        for name in ("a", "b"):
            side: Side = getattr(self, name)
            out[name] = {"path": side.path, "label": side.label, "device": side.device, "steps": len(side.steps),
                         "ranks": list(side.ranks), "notes": list(side.notes)}
        for name in ("step", "phases", "operators", "kernels"):
            value = getattr(self, name)
            out[name] = _delta(value) if isinstance(value, Delta) else [_delta(d) for d in value]
        out.update(confidence=self.confidence, min_change=self.min_change, notes=list(self.notes),
                   fail_over=self.fail_over, failed=self.failed)
        return out


def _delta(d: Delta) -> dict:
    return {**to_json(d), "change": d.change}
