"""One-time costs apart from the steady step (torch-free): what a trick pays before its
steady steps, measured once, never charged to every pair, and the run-time estimates the
scheduler and the budget plan use.

A trial's runs each start a fresh process (or fork), so a trick that compiles pays its
compilation in every run: the **first** run compiles cold (``compile_s``: the warm-up steps'
time beyond their steady time), later runs hit Inductor's on-disk cache (``compile_s_cached``,
the cheapest of them). The pairs compare steady steps only (the warm-up steps are not
measured), so the compilation never enters a speed-up; the first run's cost is reported once,
with the number of steps after which the steady gain pays it back (``break_even_steps``, only
for a trick decided faster). The same holds for any trick whose warm-up costs more than the
baseline's (DataLoader worker start-up, cuDNN's algorithm search): its extra warm-up time is
its one-time cost per run (``Knob.one_time`` says what it is).

For the budget, the scheduler estimates a run of a trial from its own later runs (an expensive
trial's cold first run is not the price of its next one), else from the baseline's; an
expensive trial that never ran is charged ``EXPENSIVE_FIRST_RUN`` baseline runs for its first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pitstop.stats import median
from pitstop.tune.result import CompileCost, StartupCost, Trial
from pitstop.tune.run import Run

__all__ = ["EXPENSIVE_FIRST_RUN", "MORE_STEPS", "PLAN_RUNS", "run_estimate", "first_run_guess", "warmup_overhead",
           "one_time_cost", "startup_cost", "steps_for", "STARTUP_FLOOR"]

#: an expensive trial's first run (its cold compilation) before it is measured, in baseline runs
EXPENSIVE_FIRST_RUN = 3.0
#: a cheap trick's warm-up beyond its reference's is reported from this many seconds (and beyond the
#: reference's own run-to-run spread of it)
STARTUP_FLOOR = 0.1
#: at most this many times ``--steps`` per run where the set-up dominates a run (``more_steps``)
MORE_STEPS = 8
#: under ``--budget``, more steps per run only while this many runs still fit what is left
PLAN_RUNS = 12


def _elapsed(runs: Sequence[Run]) -> float | None:
    return median([r.elapsed for r in runs if r.ok and r.elapsed > 0])


def run_estimate(runs: Sequence[Run], baseline: Trial, expensive: bool = False) -> float:
    """Seconds one more run of a configuration whose runs so far are ``runs`` should take: their
    median (an expensive configuration's later runs once it has some: its first compiled cold),
    else the baseline's runs (times :data:`EXPENSIVE_FIRST_RUN` for an expensive configuration's
    first), else 0 (nothing known)."""
    own = [r for r in runs if r.ok]
    if expensive and len(own) >= 2:
        own = own[1:]
    mine = _elapsed(own)
    if mine is not None:
        return mine
    base = _elapsed(baseline.runs) or 0.0
    return base * (EXPENSIVE_FIRST_RUN if expensive and not runs else 1.0)


def first_run_guess(baseline: Trial) -> float:
    """The one-time cost an expensive trial that never ran is charged: its first run beyond a
    plain one (:data:`EXPENSIVE_FIRST_RUN` - 1 baseline runs)."""
    return (_elapsed(baseline.runs) or 0.0) * (EXPENSIVE_FIRST_RUN - 1)


def warmup_overhead(run: Run) -> float | None:
    """The warm-up steps' time beyond as many steady steps (None without both)."""
    med = run.median_step
    if med is None or not run.warmup_times:
        return None
    return max(0.0, sum(run.warmup_times) - med * len(run.warmup_times))


def one_time_cost(trial: Trial, baseline: Trial, reference: Trial | None = None) -> CompileCost | None:
    """An expensive trial's one-off cost (compilation), apart from its steady speed: the first
    (cold) run's warm-up overhead, the cheapest later one, and after how many steps the first
    pays off -- only when the trial is kept, its saving per step taken against ``reference``
    (default: the baseline; a stage on the path is measured against the path before it)."""
    if not trial.expensive:
        return None
    overheads = [o for r in trial.ok_runs if (o := warmup_overhead(r)) is not None]  # in run order: cold first
    if not overheads:
        return None
    ref = reference if reference is not None else baseline
    base, mine = ref.median_step, trial.median_step
    saved = None
    if trial.status == "kept" and base is not None and trial.speed is not None:
        saved = base - base / trial.speed.ratio
    elif trial.status == "kept" and base is not None and mine is not None:
        saved = base - mine
    return CompileCost(overheads[0], min(overheads[1:]) if overheads[1:] else None,
                       math.ceil(overheads[0] / saved) if saved and saved > 0 else None)


def _saved(trial: Trial, reference: Trial) -> float | None:
    base = reference.median_step
    if trial.status != "kept" or base is None or trial.speed is None:
        return None
    return base - base / trial.speed.ratio


def startup_cost(trial: Trial, reference: Trial) -> StartupCost | None:
    """A cheap trick's warm-up beyond ``reference``'s (its pairs' reference), paid by every run:
    the median over its runs, when it exceeds :data:`STARTUP_FLOOR` and the spread of the
    reference's own warm-ups; with the steps after which a kept trick pays it back (None: not
    clearly above the reference's)."""
    if trial.expensive:
        return None
    mine = median([o for r in trial.ok_runs if (o := warmup_overhead(r)) is not None])
    ref = [o for r in reference.ok_runs if (o := warmup_overhead(r)) is not None]
    if mine is None or len(ref) < 2:
        return None
    extra = mine - (median(ref) or 0.0)
    if extra <= max(STARTUP_FLOOR, max(ref) - min(ref)):
        return None
    saved = _saved(trial, reference)
    return StartupCost(extra, math.ceil(extra / saved) if saved and saved > 0 else None)


def steps_for(run: Run, steps: int, remaining: float) -> tuple[int, str | None]:
    """Measured steps per run, and why, from ``run`` (the survey's): more than ``steps`` when it
    spent longer on everything but its measured steps (set-up, warm-up) than on them, so that a
    pair costs mostly measuring: as many steps as that time holds, at most ``MORE_STEPS`` x
    ``steps`` and while ``PLAN_RUNS`` runs fit ``remaining`` seconds (the budget left)."""
    measured = sum(run.step_times)
    if not run.step_times or measured <= 0:
        return steps, None
    per_step, fixed = measured / len(run.step_times), max(0.0, run.elapsed - measured)
    if fixed <= measured:
        return steps, None
    more = min(steps * MORE_STEPS, math.ceil(fixed / per_step))
    if math.isfinite(remaining):
        more = min(more, int((remaining / PLAN_RUNS - fixed) / per_step))
    if more <= steps:
        return steps, None
    return more, (f"the survey's run spent {fixed:.1f} s on set-up and warm-up and {measured:.1f} s on its "
                  f"{len(run.step_times)} measured steps: {more} steps per run (instead of {steps}), so that a pair "
                  "costs mostly measuring")
