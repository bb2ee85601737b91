"""A against B, quantity by quantity, with a verdict that weighs the step-to-step noise.

For each quantity with per-step samples on both sides the ratio of medians B / A gets a
bootstrap interval from the samples (:func:`pitstop.stats.ratio_interval`): *slower* when the
whole interval lies above 1 and the median change is at least ``min_change``, *faster* the other
way round, otherwise *no change (within noise)*. A quantity seen on one side only is *new* or
*gone*; one known as a single value on a side (one step) is *changed* without a noise verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pitstop.compare.model import (FASTER, NO_SAMPLES, ONLY_A, ONLY_B, SAME, SLOWER, Comparison, Delta,
                                   Side)
from pitstop.stats import median, ratio_interval

__all__ = ["compare_sides", "delta", "unlike"]


def delta(group: str, name: str, a: Sequence[float], b: Sequence[float], *, confidence: float = 0.9,
          min_change: float = 0.02, step_a: float | None = None, step_b: float | None = None) -> Delta:
    """One quantity's delta (``a``, ``b``: its seconds in each step of each side)."""
    ma, mb = median(a), median(b)
    share_a = ma / step_a if ma is not None and step_a else None
    share_b = mb / step_b if mb is not None and step_b else None
    if not ma and not mb:
        return Delta(group, name, ma, mb, None, None, None, SAME, share_a, share_b)
    if not ma:
        return Delta(group, name, ma, mb, None, None, None, ONLY_B, share_a, share_b)
    if not mb:
        return Delta(group, name, ma, mb, None, None, None, ONLY_A, share_a, share_b)
    ratio = mb / ma
    if len(a) < 2 or len(b) < 2:
        verdict = NO_SAMPLES if abs(math.log(ratio)) >= math.log1p(min_change) else SAME
        return Delta(group, name, ma, mb, ratio, ratio, ratio, verdict, share_a, share_b)
    iv = ratio_interval(list(b), list(a), confidence=confidence)
    if iv.low > 1.0 and ratio >= 1.0 + min_change:
        verdict = SLOWER
    elif iv.high < 1.0 and ratio <= 1.0 / (1.0 + min_change):
        verdict = FASTER
    else:
        verdict = SAME
    return Delta(group, name, ma, mb, ratio, iv.low, iv.high, verdict, share_a, share_b)


def _group(group: str, a: dict[str, tuple[float, ...]], b: dict[str, tuple[float, ...]], top: int,
           step_a: float | None, step_b: float | None, **kw) -> tuple[Delta, ...]:
    """Deltas of the names in either side, the ``top`` largest absolute changes (seconds per step)."""
    names = sorted(set(a) | set(b))
    out = [delta(group, n, a.get(n, ()), b.get(n, ()), step_a=step_a, step_b=step_b, **kw) for n in names]
    if group == "phase":  # the step's parts, largest first
        out.sort(key=lambda d: -max(d.a or 0.0, d.b or 0.0))
    else:  # the largest changes in seconds per step first
        out.sort(key=lambda d: -abs((d.b or 0.0) - (d.a or 0.0)))
    return tuple(out[:top]) if top else tuple(out)


def unlike(a: Side, b: Side) -> list[str]:
    """What makes the two sides unlike, in words (other hardware, other ranks)."""
    notes = []
    if a.device != b.device:
        notes.append(f"different hardware: A ran on {a.device or 'an unknown device'}, B on "
                     f"{b.device or 'an unknown device'}; part of the difference is the hardware's")
    if a.kind == "doctor" and a.label != b.label:
        notes.append(f"different runs: A is {a.label}, B is {b.label}")
    if a.ranks != b.ranks:
        notes.append(f"different ranks: A holds rank(s) {_ranks(a)}, B rank(s) {_ranks(b)}")
    return notes


def _ranks(side: Side) -> str:
    return ", ".join(map(str, side.ranks)) or "unknown"


def compare_sides(a: Side, b: Side, *, confidence: float = 0.9, min_change: float = 0.02,
                  fail_over: float | None = None, top: int = 15, notes: Sequence[str] = ()) -> Comparison:
    """A against B. ``fail_over`` (a percentage) marks the comparison failed when the step is
    *slower* (beyond noise) by more than that."""
    if a.kind != b.kind:
        raise ValueError(f"cannot compare a {a.kind} with a {b.kind}")
    kw = {"confidence": confidence, "min_change": min_change}
    step = delta("step", "step", a.steps, b.steps, **kw)
    sa, sb = step.a, step.b
    failed = bool(fail_over is not None and step.verdict in (SLOWER, NO_SAMPLES) and step.ratio is not None
                  and step.ratio > 1.0 + fail_over / 100.0)
    return Comparison(
        kind=a.kind, a=a, b=b, step=step,
        phases=_group("phase", a.phases, b.phases, 0, sa, sb, **kw),
        operators=_group("operator", a.operators, b.operators, top, sa, sb, **kw),
        kernels=_group("kernel", a.kernels, b.kernels, top, sa, sb, **kw),
        confidence=confidence, min_change=min_change, notes=tuple(unlike(a, b)) + tuple(notes),
        fail_over=fail_over, failed=failed)
