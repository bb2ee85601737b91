"""Is a trick's training still the same training? Compare loss trajectories (torch-free).

Every run is seeded the same way (the doctor's bootstrap in script mode, ``seed_everything``
before each API trial), so the baseline's runs see the same data in the same order and start
from the same weights. A trial's loss trajectory (per optimizer step, warmup included;
median over its runs) is compared with the baseline's:

    deviation = mean_i |trial_i - base_i| / mean_i |base_i|

and passes when ``deviation <= tolerance``, where

    tolerance = max(floor, SPREAD_FACTOR * baseline spread)
    baseline spread = mean_i (max - min over baseline runs at step i) / mean_i |base_i|

The spread scales the tolerance to how much the baseline itself varies run to run (GPU
atomics, non-deterministic kernels); on CPU it is usually 0 (bitwise repeatable), so the
floor decides. Floors, calibrated on the bundled CNN (20 steps, SGD momentum; measured on
this machine): bf16 autocast deviates 0.02% (max 0.1% at one step), channels_last and the
fused optimizer < 0.01%, while changing the seed deviates 5.9% and doubling the learning
rate 8.9%. :data:`FLOOR_EXACT` (1%) is for tricks that only reorder fp32 arithmetic
(layout, fused kernels, workers, compile); :data:`FLOOR_REDUCED` (3%) for bf16/fp16/TF32.
Both are well under "a different seed", and far above what the tricks themselves do.

Any non-finite trial loss where the baseline is finite rejects the trial outright.

Randomness inside the model (dropout) must be drawn the same way in the baseline and the
trial, or the comparison measures a different dropout stream rather than the trick:
``torch.compile`` trials therefore run with inductor's ``fallback_random`` (eager's random
ops, the same masks; see ``pitstop explain PIT601``), which makes the compiled losses of an
MLP with dropout identical to eager's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["LossCheck", "check_losses", "check_runs", "median_trajectory", "FLOOR_EXACT", "FLOOR_REDUCED", "SPREAD_FACTOR"]

FLOOR_EXACT = 0.01
FLOOR_REDUCED = 0.03
SPREAD_FACTOR = 3.0


@dataclass(frozen=True)
class LossCheck:
    """``status``: ``ok``, ``diverged``, ``nan`` or ``unchecked`` (no losses captured)."""

    status: str
    deviation: float | None
    tolerance: float | None
    message: str

    @property
    def passed(self) -> bool:
        return self.status in ("ok", "unchecked")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "deviation": self.deviation, "tolerance": self.tolerance,
                "message": self.message}


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def median_trajectory(runs: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per-step median over runs of their losses (non-finite values propagate as NaN so a
    NaN is never hidden by the median; missing values are skipped)."""
    n = max((len(r) for r in runs), default=0)
    out: list[float | None] = []
    for i in range(n):
        vals = [r[i] for r in runs if i < len(r) and r[i] is not None]
        if not vals:
            out.append(None)
        elif any(not math.isfinite(v) for v in vals):
            out.append(math.nan)
        else:
            s = sorted(vals)
            m = len(s) // 2
            out.append(s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2)
    return out


def baseline_spread(runs: Sequence[Sequence[float | None]]) -> float:
    """Mean per-step range over the baseline's runs, relative to the mean |loss|."""
    ref = median_trajectory(runs)
    ranges, scale = [], []
    for i, b in enumerate(ref):
        vals = [r[i] for r in runs if i < len(r) and _finite(r[i])]
        if len(vals) >= 2 and _finite(b):
            ranges.append(max(vals) - min(vals))
            scale.append(abs(b))
    if not ranges or not sum(scale):
        return 0.0
    return (sum(ranges) / len(ranges)) / (sum(scale) / len(scale))


def check_losses(baseline: Sequence[Sequence[float | None]], trial: Sequence[Sequence[float | None]], *,
                 reduced_precision: bool = False, floor: float | None = None) -> LossCheck:
    """Compare a trial's loss trajectories with the baseline's (lists of per-step losses,
    one list per run)."""
    ref = median_trajectory(baseline)
    got = median_trajectory(trial)
    for i, (b, t) in enumerate(zip(ref, got)):
        if _finite(b) and t is not None and not math.isfinite(t):
            return LossCheck("nan", None, None, f"loss is {t} at optimizer step {i + 1} (baseline {b:.4g})")
    pairs = [(b, t) for b, t in zip(ref, got) if _finite(b) and _finite(t)]
    if len(pairs) < 2:
        return LossCheck("unchecked", None, None,
                         "losses not captured (the script never called .backward() on a loss tensor the "
                         "bootstrap could read), so equivalence could not be checked")
    scale = sum(abs(b) for b, _ in pairs) / len(pairs)
    if scale == 0:
        scale = 1.0
    deviation = sum(abs(t - b) for b, t in pairs) / len(pairs) / scale
    base_floor = floor if floor is not None else (FLOOR_REDUCED if reduced_precision else FLOOR_EXACT)
    spread = baseline_spread(baseline)
    tolerance = max(base_floor, SPREAD_FACTOR * spread)
    why = (f"{SPREAD_FACTOR:g}x the baseline's run-to-run spread" if SPREAD_FACTOR * spread > base_floor
           else f"floor for {'reduced-precision' if reduced_precision else 'exact'} tricks")
    if deviation <= tolerance:
        return LossCheck("ok", deviation, tolerance,
                         f"loss within {deviation:.2%} of the baseline over {len(pairs)} steps "
                         f"(tolerance {tolerance:.2%}, {why})")
    last_b, last_t = pairs[-1]
    return LossCheck("diverged", deviation, tolerance,
                     f"loss deviates {deviation:.1%} from the baseline on average over {len(pairs)} steps "
                     f"(tolerance {tolerance:.1%}, {why}); last step {last_t:.4g} vs {last_b:.4g}")


def check_runs(base: Sequence[Any], mine: Sequence[Any], *, reduced_precision: bool, horizon: int) -> LossCheck:
    """:func:`check_losses` of runs (:class:`pitstop.tune.run.Run`) over their first ``horizon``
    steps; for torchrun jobs (``rank_losses``) every rank's, the failing or worst one reported."""
    ranks = min((len(r.rank_losses) for r in [*base, *mine]), default=0)
    if ranks < 2:
        return check_losses([r.losses[:horizon] for r in base], [r.losses[:horizon] for r in mine],
                            reduced_precision=reduced_precision)
    checks = [check_losses([r.rank_losses[k][:horizon] for r in base], [r.rank_losses[k][:horizon] for r in mine],
                           reduced_precision=reduced_precision) for k in range(ranks)]
    k = next((k for k, c in enumerate(checks) if not c.passed), None)
    if k is None:
        k = max(range(ranks), key=lambda i: checks[i].deviation or 0.0)
    return replace(checks[k], message=f"rank {k} of {ranks} (the worst): {checks[k].message}")
