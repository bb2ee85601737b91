"""Paired, adaptive speed comparisons that hold on a busy machine (torch-free).

One core for ``pitstop tune`` (runs of a training script) and the doctor's probes (timed
calls in the child): both compare a *baseline* with a *candidate* measured next to each
other in time.

- A :class:`Sample` is one measurement of one configuration: the typical step's wall time,
  its CPU time (the process and its DataLoader workers), how long its threads waited for a
  core (run-queue delay), how long the main thread was active, and on CUDA the device time
  between events at the step boundaries.
- A :class:`Pair` is a baseline sample and a candidate sample taken adjacent in time; its
  ratio (baseline / candidate, > 1: the candidate is faster) cancels the load both saw.
- :func:`choose_measure` picks the clock that the load actually observed does not distort,
  and says why: CUDA event time on a GPU; on CPU wall time when the machine is quiet, CPU
  time when threads waited for cores (contention, in any run of the pairs: one contended run
  skews its pair), but wall time again when the step is *wait-dominated* (its main thread
  slept: CPU time misses such waits) or when the candidate changes how many cores it wants
  (DataLoader workers: CPU time cannot credit parallelism).
- :func:`decide` gives the interval over pairs (:func:`pitstop.stats.paired_ratio_interval`)
  and a status: ``faster`` / ``slower`` / ``same`` once the interval decides, ``close`` when
  it straddles the bar but cannot exceed it by more than half the margin (more pairs could
  only decide a gain too small to matter: an indifference zone, so that a trick whose effect
  sits on the bar stops early and gets the same verdict every time), ``undecided`` otherwise
  (measure more pairs). No verdict from one pair; no second bar on top of the
  interval (the pairs already hold the noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pitstop.stats import median, paired_ratio_interval

__all__ = ["Sample", "Pair", "Measure", "Decision", "DecisionStatus", "choose_measure", "decide", "MIN_PAIRS", "CONTENTION",
           "WAIT_DOMINATED"]

#: pairs before any verdict (a dramatic slowdown, interval below 1/2, may stop at 2).
MIN_PAIRS = 3
#: run-queue delay per CPU second above which the machine counts as contended.
CONTENTION = 0.10
#: share of the step the main thread slept above which the step is wait-dominated.
WAIT_DOMINATED = 0.30
#: candidate / baseline cores-in-use ratio beyond which the candidate changes parallelism.
PARALLEL_CHANGE = 1.25


@dataclass(frozen=True)
class Sample:
    """One measurement of one configuration (medians over its steps or calls)."""

    wall: float
    cpu: float | None = None         # CPU seconds: the process and its child processes
    run_delay: float | None = None   # seconds its threads were runnable but had no core
    active: float | None = None      # seconds the main thread ran or was runnable
    gpu: float | None = None         # CUDA event seconds

    def value(self, measure: str) -> float | None:
        return getattr(self, measure)

    @classmethod
    def of(cls, steps: Sequence[Any]) -> Sample | None:
        """Medians of step records (anything with ``wall``, ``cpu``, ``cpu_children``,
        ``run_delay``, ``main_active``, ``gpu`` attributes; missing ones are None)."""
        if not steps:
            return None
        cpus = [s.cpu + (getattr(s, "cpu_children", None) or 0.0) for s in steps if s.cpu is not None]
        return cls(wall=median([s.wall for s in steps]), cpu=median(cpus),
                   run_delay=median([getattr(s, "run_delay", None) for s in steps]),
                   active=median([getattr(s, "main_active", None) for s in steps]),
                   gpu=median([getattr(s, "gpu", None) for s in steps]))

    @classmethod
    def mean(cls, samples: Sequence[Sample]) -> Sample:
        """Field-wise mean (the baseline around a candidate: the runs before and after it)."""
        def avg(name: str) -> float | None:
            xs = [getattr(s, name) for s in samples]
            return None if any(x is None for x in xs) else sum(xs) / len(xs)
        return cls(wall=avg("wall"), cpu=avg("cpu"), run_delay=avg("run_delay"), active=avg("active"), gpu=avg("gpu"))

    def to_dict(self) -> dict[str, Any]:
        return {"wall": self.wall, "cpu": self.cpu, "run_delay": self.run_delay, "active": self.active, "gpu": self.gpu}


@dataclass(frozen=True)
class Pair:
    base: Sample
    trial: Sample

    def ratio(self, measure: str) -> float | None:
        b, t = self.base.value(measure), self.trial.value(measure)
        return b / t if b and t and b > 0 and t > 0 else None


@dataclass(frozen=True)
class Measure:
    name: str    # "wall" | "cpu" | "gpu"
    why: str
    contention: float | None = None   # run-queue delay per CPU second (the busiest run of the pairs)
    asleep: float | None = None       # share of the step the main thread slept (the larger side)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "why": self.why, "contention": self.contention, "asleep": self.asleep}


def choose_measure(pairs: Sequence[Pair]) -> Measure:
    """The clock to decide on, from what the pairs observed (see the module docs)."""
    samples = [s for p in pairs for s in (p.base, p.trial)]
    if samples and all(s.gpu for s in samples):
        return Measure("gpu", "CUDA events at the step boundaries (host load does not enter)")
    if not samples or any(s.cpu is None or s.run_delay is None for s in samples):
        return Measure("wall", "wall time (no per-process CPU clocks on this system)")
    per_run = [s.run_delay / s.cpu for s in samples if s.cpu]
    contention = max(per_run, default=0.0)  # the busiest run: one contended run skews its pair's wall ratio

    def asleep(side: str) -> float | None:
        xs = [1 - getattr(p, side).active / getattr(p, side).wall for p in pairs
              if getattr(p, side).active is not None and getattr(p, side).wall]
        return median(xs)

    sleep = max((x for x in (asleep("base"), asleep("trial")) if x is not None), default=None)
    if contention < CONTENTION:
        return Measure("wall", f"wall time: the machine is quiet (threads waited at most {contention:.0%} of their "
                               "CPU time for a core, in every run)", contention, sleep)
    if sleep is not None and sleep > WAIT_DOMINATED:
        return Measure("wall", f"wall time: the step is wait-dominated (the main thread slept {sleep:.0%} of it; CPU "
                               "time misses waits), although the machine is busy", contention, sleep)
    # cores wanted: CPU time plus the time spent waiting for a core, per second (a contended
    # single thread wants 1.0 although it got 0.7: contention is not a change of parallelism)
    util_b = median([(p.base.cpu + p.base.run_delay) / p.base.wall for p in pairs if p.base.wall])
    util_t = median([(p.trial.cpu + p.trial.run_delay) / p.trial.wall for p in pairs if p.trial.wall])
    if util_b and util_t and not 1 / PARALLEL_CHANGE < util_t / util_b < PARALLEL_CHANGE:
        return Measure("wall", f"wall time: the candidate changes how many cores work ({util_b:.1f} -> {util_t:.1f} "
                               "CPU s per s; CPU time cannot credit parallelism), although the machine is busy",
                       contention, sleep)
    typical = median(per_run) or 0.0
    return Measure("cpu", f"CPU time (process + workers): the machine is busy (threads waited up to {contention:.0%} "
                          f"of their CPU time for a core, {typical:.0%} in the typical run), which inflates wall time",
                   contention, sleep)


#: How a paired comparison ended (:func:`decide`); ``tune/verdict.py`` maps each to a trial status.
DecisionStatus = Literal["faster", "slower", "same", "close", "undecided"]


@dataclass(frozen=True)
class Decision:
    """The paired verdict on a candidate vs a baseline."""

    status: DecisionStatus
    ratio: float         # typical baseline / candidate on ``measure`` (> 1: candidate faster)
    low: float
    high: float
    confidence: float
    pairs: int
    won: int             # pairs in which the candidate was faster
    measure: Measure
    other: dict[str, float] | None = None   # the ratio on the other clocks, for the report

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "confidence": self.confidence,
                "rounds_won": self.won, "rounds": self.pairs, "decided": self.status != "undecided",
                "measure": self.measure.name, "measure_why": self.measure.why, "other_measures": dict(self.other or {})}


def decide(pairs: Sequence[Pair], *, margin: float = 0.05, confidence: float = 0.9, min_pairs: int = MIN_PAIRS,
           seed: int = 0, measure: Measure | None = None) -> Decision | None:
    """Verdict over ``pairs`` (None when no pair has a ratio). ``faster``: the interval lies
    above ``1 + margin``; ``slower``: below ``1 / (1 + margin)``; ``same``: it cannot reach
    ``1 + margin`` any more (upper bound below it) and its point estimate is not below
    ``1 / (1 + margin)`` (such a trial is measured on until it is called slower or runs out of
    pairs); ``close``: the interval straddles ``1 + margin`` but lies within
    ``[1 / (1 + margin), (1 + margin) ** 1.5]`` (a gain of at most half a margin above the
    bar: not worth more pairs); ``undecided``: measure more pairs."""
    measure = measure or choose_measure(pairs)
    ratios = [r for p in pairs if (r := p.ratio(measure.name)) is not None]
    if not ratios:
        return None
    iv = paired_ratio_interval(ratios, confidence=confidence, seed=seed)
    n, won = len(ratios), sum(r > 1 for r in ratios)
    bar = 1 + margin
    status = "undecided"
    if n >= min_pairs and iv.low > bar:
        status = "faster"
    elif (n >= min_pairs and iv.high < 1 / bar) or (n >= 2 and iv.high < 0.5):
        status = "slower"
    elif n >= min_pairs and iv.high < bar and iv.ratio >= 1 / bar:
        status = "same"  # cannot reach 1 + margin; a point estimate below 1 / bar measures on (likely slower)
    elif n >= min_pairs and iv.low >= 1 / bar and iv.high < bar * math.sqrt(bar):
        status = "close"  # on the bar: at most half a margin above it, never below 1 / bar
    other = {}
    for name in ("wall", "cpu", "gpu"):
        if name != measure.name:
            rs = [r for p in pairs if (r := p.ratio(name)) is not None]
            if rs:
                other[name] = math.exp(sum(math.log(r) for r in rs) / len(rs))
    return Decision(status, iv.ratio, iv.low, iv.high, iv.confidence, n, won, measure, other)
