"""Small, dependency-free statistics for timings: summaries and ratio intervals.

Shared by ``bench`` and ``tune`` (and the doctor's step times). Timing on shared machines is
noisy, so comparisons use medians and a bootstrap interval on the ratio of medians: a
difference is only called real when the whole interval is on one side of the noise.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from functools import lru_cache
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["StepTime", "Summary", "summarize", "quantile", "median", "RatioInterval", "ratio_interval", "round_ratio_interval",
           "paired_ratio_interval", "t_quantile"]


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of ``xs`` (q in [0, 1]); NaN for an empty sequence."""
    if not xs:
        return math.nan
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: Iterable[float | None]) -> float | None:
    """The median of the values of ``xs`` that are not None; None when there are none."""
    vals = [x for x in xs if x is not None]
    return quantile(vals, 0.5) if vals else None


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    p10: float
    p90: float
    iqr: float
    min: float
    max: float

    @property
    def rel_iqr(self) -> float:
        """IQR / median: the relative spread, a noise measure."""
        return self.iqr / self.median if self.median else math.nan


@dataclass(frozen=True)
class StepTime:
    """Seconds per step: median, p90, mean, min, max. The one step-time record of the doctor
    (observed steps' wall times), ``pitstop trace`` (host ``ProfilerStep`` durations) and compare."""

    median: float = 0.0
    p90: float = 0.0
    mean: float = 0.0
    min: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, seconds: Sequence[float]) -> StepTime:
        """The record of ``seconds`` (one value per step; at least one), by :func:`quantile`."""
        s = summarize(seconds)
        return cls(median=s.median, p90=s.p90, mean=s.mean, min=s.min, max=s.max)


def summarize(xs: Sequence[float]) -> Summary:
    xs = [float(x) for x in xs]
    if not xs:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan)
    return Summary(
        n=len(xs),
        median=quantile(xs, 0.5),
        mean=sum(xs) / len(xs),
        p10=quantile(xs, 0.1),
        p90=quantile(xs, 0.9),
        iqr=quantile(xs, 0.75) - quantile(xs, 0.25),
        min=min(xs),
        max=max(xs),
    )


@dataclass(frozen=True)
class RatioInterval:
    """``ratio`` = median(baseline) / median(candidate): > 1 means the candidate is faster
    (for times). ``low``/``high`` bound it at the given confidence."""

    ratio: float
    low: float
    high: float
    confidence: float

    def excludes(self, value: float = 1.0, margin: float = 0.0) -> bool:
        """True when the interval lies entirely above ``value * (1 + margin)`` or entirely
        below ``value / (1 + margin)``."""
        return self.low > value * (1 + margin) or self.high < value / (1 + margin)


def ratio_interval(baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.9,
                   n_boot: int = 2000, seed: int = 0) -> RatioInterval:
    """Bootstrap interval of median(baseline) / median(candidate)."""
    if not baseline or not candidate:
        raise ValueError("both samples must be non-empty")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    med = lambda xs: quantile(xs, 0.5)  # noqa: E731
    point = med(baseline) / med(candidate)
    rng = random.Random(seed)
    boots = []
    for _ in range(n_boot):
        b = [rng.choice(baseline) for _ in baseline]
        c = [rng.choice(candidate) for _ in candidate]
        mc = med(c)
        boots.append(med(b) / mc if mc else math.inf)
    alpha = (1 - confidence) / 2
    return RatioInterval(point, quantile(boots, alpha), quantile(boots, 1 - alpha), confidence)


# Ratio intervals that respect how timings were taken: in rounds.
# Samples taken in the same round (one ``blocked_autorange`` per variant, side by side in
# time) share that moment's load from other processes, so they are not independent: a
# bootstrap over single samples believes a burst of load is many independent observations
# and gives too narrow an interval. :func:`round_ratio_interval` resamples whole *rounds*
# instead, and pairs them (the baseline and candidate samples of a drawn round go in
# together), so a difference counts only when it shows round after round.


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
    point = quantile(b_all, 0.5) / quantile(c_all, 0.5)
    rng = random.Random(seed)
    boots = []
    for _ in range(n_boot):
        pick = [rng.choice(rounds) for _ in rounds]
        b = [v for r in pick for v in by_b[r]]
        c = [v for r in pick for v in by_c[r]]
        mc = quantile(c, 0.5)
        boots.append(quantile(b, 0.5) / mc if mc else float("inf"))
    alpha = (1 - confidence) / 2
    return RatioInterval(point, min(point, quantile(boots, alpha)), max(point, quantile(boots, 1 - alpha)),
                         confidence)


# Paired comparisons: each pair is a baseline measurement and a candidate measurement taken
# next to each other in time, so load from other processes hits both alike; the ratio of a
# pair cancels it. The interval is over pairs (bootstrap of the mean log-ratio): it already
# holds the machine's noise, and no second bar (the baseline's own spread) goes on top.


def paired_ratio_interval(ratios: Sequence[float], confidence: float = 0.9, n_boot: int = 2000,
                          seed: int = 0) -> RatioInterval:
    """Interval of the typical per-pair ratio (geometric mean of ``ratios``, each
    baseline / candidate: > 1 means the candidate is faster).

    The wider of two intervals on the log-ratios: the bootstrap percentile interval and
    Student's t interval. With 3-5 pairs the bootstrap alone is too narrow (its resamples
    never leave the range of the few pairs seen), so borderline effects were "decided" one
    way in one search and the other way in the next; the t interval keeps them undecided
    until enough pairs agree. With a single pair the interval is ``[0, inf]``: one pair
    decides nothing."""
    rs = [float(r) for r in ratios if r > 0 and math.isfinite(r)]
    if not rs:
        raise ValueError("need at least one finite, positive ratio")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    logs = [math.log(r) for r in rs]
    n = len(logs)
    mean = sum(logs) / n
    point = math.exp(mean)
    if n < 2:
        return RatioInterval(point, 0.0, math.inf, confidence)
    rng = random.Random(seed)
    boots = sorted(sum(rng.choice(logs) for _ in range(n)) / n for _ in range(n_boot))
    alpha = (1 - confidence) / 2
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(1 - alpha, n - 1) * sd / math.sqrt(n)
    low = min(quantile(boots, alpha), mean - half)
    high = max(quantile(boots, 1 - alpha), mean + half)
    return RatioInterval(point, min(point, math.exp(low)), max(point, math.exp(high)), confidence)


@lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t distribution with ``df`` degrees of
    freedom: the density integrated with Simpson's rule, inverted by Newton's method (no SciPy).

    The CDF is concave for ``x >= 0``, so Newton's steps from 0 approach the root from below
    without overshooting: 6-10 integrations instead of bisection's 50 (about 20 ms a call
    before; a doctor run with probes asks for several ``df``, and tune's racing for new ``p``)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"need 0.5 < p < 1 and df >= 1, got p={p!r}, df={df!r}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def pdf(x: float) -> float:
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    def cdf(x: float, steps: int = 2000) -> float:  # P(T <= x) for x >= 0
        h = x / steps
        f = [c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(steps + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    x = 0.0
    for _ in range(200):
        step = (p - cdf(x)) / pdf(x)
        x += step
        if abs(step) <= 1e-13 * (1.0 + x):
            break
    return x
