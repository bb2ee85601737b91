"""Ratio intervals that respect how timings were taken: in rounds (torch-free).

Samples taken in the same round (one ``blocked_autorange`` per variant, side by side in
time) share that moment's load from other processes, so they are not independent: a
bootstrap over single samples believes a burst of load is many independent observations
and gives too narrow an interval. :func:`round_ratio_interval` resamples whole *rounds*
instead, and pairs them (the baseline and candidate samples of a drawn round go in
together), so a difference counts only when it shows round after round.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from pitstop.stats import RatioInterval, quantile, ratio_interval

__all__ = ["round_ratio_interval"]


def _median(xs: list[float]) -> float:
    return quantile(xs, 0.5)


def round_ratio_interval(baseline: Sequence[tuple[int, float]], candidate: Sequence[tuple[int, float]],
                         confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> RatioInterval:
    """Interval of median(baseline) / median(candidate), bootstrapping paired rounds.

    ``baseline`` and ``candidate`` are ``(round, value)`` pairs. With fewer than two rounds in
    common it falls back to :func:`pitstop.stats.ratio_interval` over the samples.
    """
    if not baseline or not candidate:
        raise ValueError("both samples must be non-empty")
    by_b: dict[int, list[float]] = defaultdict(list)
    by_c: dict[int, list[float]] = defaultdict(list)
    for r, v in baseline:
        by_b[r].append(v)
    for r, v in candidate:
        by_c[r].append(v)
    rounds = sorted(set(by_b) & set(by_c))
    b_all, c_all = [v for _, v in baseline], [v for _, v in candidate]
    if len(rounds) < 2:
        return ratio_interval(b_all, c_all, confidence=confidence, n_boot=n_boot, seed=seed)
    point = _median(b_all) / _median(c_all)
    rng = random.Random(seed)
    boots = []
    for _ in range(n_boot):
        pick = [rng.choice(rounds) for _ in rounds]
        b = [v for r in pick for v in by_b[r]]
        c = [v for r in pick for v in by_c[r]]
        mc = _median(c)
        boots.append(_median(b) / mc if mc else float("inf"))
    alpha = (1 - confidence) / 2
    return RatioInterval(point, min(point, quantile(boots, alpha)), max(point, quantile(boots, 1 - alpha)),
                         confidence)
