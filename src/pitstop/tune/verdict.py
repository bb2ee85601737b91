"""Speed comparisons and verdicts: is a trick faster than the noise? (torch-free)

The unit of speed is the wall time of one optimizer step (steady state, after warmup).
A configuration is run several times, interleaved with the baseline in *rounds* (every
round runs the baseline and each trial once, in a rotating order), so slow drifts of a
shared machine hit both sides alike.

- **speed-up**: median baseline step time / median trial step time, over all observed
  steps of all runs, with a bootstrap interval (:func:`pitstop.stats.ratio_interval`).
- **noise floor**: the baseline's own run-to-run spread, ``max / min - 1`` of the medians of
  its runs: how much "the same thing" differs between two runs on this machine right now.
- **kept** only when (1) the whole interval lies above ``(1 + noise) * (1 + margin)`` and
  (2) the trial was faster than the baseline in at least three quarters of the rounds it
  ran in (all of them up to three rounds; paired by round, robust to load that changes
  between rounds). **slower** when the interval lies entirely
  below ``1 / ((1 + noise) * (1 + margin))``. Otherwise **no gain**: normal and honest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pitstop.stats import quantile, ratio_interval
from pitstop.tune.result import Run

__all__ = ["Speed", "compare", "noise_floor", "speed_verdict", "DEFAULT_MARGIN", "DEFAULT_CONFIDENCE"]

DEFAULT_MARGIN = 0.05
DEFAULT_CONFIDENCE = 0.9


@dataclass(frozen=True)
class Speed:
    ratio: float          # > 1: the trial is faster
    low: float
    high: float
    confidence: float
    rounds_won: int       # rounds in which the trial's median step beat the baseline's
    rounds: int           # rounds with both a baseline and a trial run

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "confidence": self.confidence,
                "rounds_won": self.rounds_won, "rounds": self.rounds}


def _medians(runs: Sequence[Run]) -> list[float]:
    return [m for r in runs if r.ok and (m := r.median_step) is not None]


def noise_floor(baseline_runs: Sequence[Run]) -> float:
    """Relative spread of the baseline between runs: ``max(median) / min(median) - 1``."""
    meds = _medians(baseline_runs)
    if len(meds) < 2 or min(meds) <= 0:
        return 0.0
    return max(meds) / min(meds) - 1.0


def compare(baseline_runs: Sequence[Run], trial_runs: Sequence[Run], *, confidence: float = DEFAULT_CONFIDENCE,
            seed: int = 0) -> Speed | None:
    """Speed of ``trial_runs`` relative to ``baseline_runs`` (None if either has no steps).

    Only the baseline runs of the rounds the trial ran in count (all of them when no round
    matches): a configuration re-measured later, under another load, is compared with the
    baseline as it ran *then*."""
    rounds_of_trial = {r.round for r in trial_runs if r.ok}
    matched = [r for r in baseline_runs if r.ok and r.round in rounds_of_trial]
    baseline_runs = matched or [r for r in baseline_runs if r.ok]
    base = [t for r in baseline_runs if r.ok for t in r.step_times]
    trial = [t for r in trial_runs if r.ok for t in r.step_times]
    if not base or not trial:
        return None
    iv = ratio_interval(base, trial, confidence=confidence, seed=seed)
    by_round = {r.round: r.median_step for r in baseline_runs if r.ok and r.step_times}
    won = rounds = 0
    for r in trial_runs:
        if r.ok and r.step_times and r.round in by_round:
            rounds += 1
            won += r.median_step < by_round[r.round]
    return Speed(iv.ratio, iv.low, iv.high, iv.confidence, won, rounds)


def speed_verdict(speed: Speed | None, noise: float, margin: float = DEFAULT_MARGIN) -> tuple[str, str]:
    """``(status, reason)`` from the speed alone: ``kept``, ``slower`` or ``no_gain``."""
    if speed is None:
        return "no_gain", "no steps measured"
    bar = (1.0 + noise) * (1.0 + margin)
    need = f"{bar:.2f}x bar (noise {noise:.0%} + margin {margin:.0%})"
    if speed.low > bar:
        if speed.rounds and speed.rounds_won < math.ceil(0.75 * speed.rounds):
            return "no_gain", (f"above the {need} but faster in only {speed.rounds_won} of {speed.rounds} "
                               "rounds: not consistent on this machine")
        return "kept", f"beats the {need}; faster in {speed.rounds_won}/{speed.rounds} rounds"
    if speed.high < 1.0 / bar:
        lost = speed.rounds - speed.rounds_won
        if speed.rounds and lost < math.ceil(0.75 * speed.rounds):
            return "no_gain", (f"below 1/{bar:.2f} but slower in only {lost} of {speed.rounds} rounds: "
                               "not consistent on this machine")
        return "slower", f"measurably slower (interval below 1/{bar:.2f}; slower in {lost}/{speed.rounds} rounds)"
    return "no_gain", f"within the noise: needs the interval above the {need}"


def median(xs: Sequence[float]) -> float | None:
    return quantile(list(xs), 0.5) if xs else None
