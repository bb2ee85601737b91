"""The budget plan, made before measuring (torch-free): which tricks the search will measure, in
which order, how long each verdict is forecast to take, and which will not fit ``--budget``
and why.

Made once the first baseline run measured what a run costs (:meth:`TuneSession.measure_singles`):
a pair costs a candidate run and half a reference run (``R C C R``); each trick's verdict is
forecast from its prior (:func:`pitstop.tune.schedule.racing.prior_of`) and the noise assumed before any
pair (:data:`pitstop.tune.schedule.racing.NOISE_PRIOR`) by :func:`pitstop.tune.schedule.racing.pairs_to_verdict`;
an expensive trick adds its first run (its compilation, estimated as
:data:`pitstop.tune.schedule.costs.EXPENSIVE_FIRST_RUN` baseline runs until measured) and comes after
the cheap ones, on top of the path; the result's confirmation in fresh pairs is forecast like
the best trick's verdict. Tricks are taken in the scheduler's order while their forecasts fit
what is left; the rest "will not fit". The plan is a forecast: the search itself applies the
same rule run by run (a trick is started only when its forecast fits what is left then), so a
trick that decides sooner than forecast can leave room for one planned out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pitstop.tune.schedule.racing import NOISE_PRIOR, Prior, confirm_seconds, pairs_to_verdict, rank

__all__ = ["PlanItem", "BudgetPlan", "make_plan"]


@dataclass(frozen=True)
class PlanItem:
    """One trick of the plan: its ``prior``, the ``pairs`` forecast to its verdict (None: not
    within its pairs at most), the ``seconds`` they cost with ``one_time_s`` (an expensive
    trick's first run beyond a plain one, estimated), when it is measured (``stage``: ``"alone"``
    against the baseline, ``"again on the path"``: a cheap trick measured again on top of the
    path the first one starts, ``"on the path"``: an expensive trick, after the cheap ones),
    whether it
    ``fits`` the budget after the tricks before it, and ``why`` not."""

    trick: str
    prior: Prior
    pairs: int | None
    seconds: float
    one_time_s: float
    stage: Literal["alone", "again on the path", "on the path"]
    fits: bool
    why: str = ""


@dataclass(frozen=True)
class BudgetPlan:
    """The plan: the ``budget`` (None: none), the survey's seconds, one run (``run_s``, of which
    ``setup_s`` before its first step) at ``steps`` measured steps (more than ``--steps`` where
    set-up dominates: ``steps_why``), a pair (``pair_s``), the ``items`` in measuring order, the
    confirmation of the result in fresh pairs (``confirm_s``; ``confirm_fits``: after the tricks
    that fit) and the seconds planned in all (the search so far included)."""

    budget: float | None
    survey_s: float
    run_s: float
    setup_s: float
    steps: int
    steps_why: str | None
    pair_s: float
    items: tuple[PlanItem, ...]
    confirm_s: float
    confirm_fits: bool
    planned_s: float

    @property
    def skipped(self) -> list[PlanItem]:
        return [i for i in self.items if not i.fits]


def make_plan(session: Any, first: list[Any], deferred: list[Any]) -> BudgetPlan:
    """The plan of ``session`` (a :class:`pitstop.tune.session.TuneSession` whose first baseline
    run ran) for the single tricks ``first`` and the expensive tricks ``deferred`` to the path
    (:class:`pitstop.tune.result.Trial` each)."""
    opts, base = session.options, session.baseline.ok_runs[-1]
    measured = sum(base.step_times)
    per_step = measured / len(base.step_times) if base.step_times else 0.0
    run_s = base.elapsed + per_step * (session.steps - len(base.step_times))  # at the steps from now on
    pair_s = 1.5 * run_s
    bar = 1 + opts.margin

    def forecast(trial: Any, prior: float) -> int | None:
        return pairs_to_verdict([], prior=prior, bar=bar, confidence=opts.confidence, min_pairs=opts.min_pairs,
                                cap=session.cap(trial), noise=NOISE_PRIOR)

    order = [c for c, _ in rank(first, logs=lambda c: [], prior=lambda c: session.prior(c).ratio,
                                pair_cost=lambda c: pair_s, one_time=session.one_time, cap=session.cap, bar=bar,
                                confidence=opts.confidence, min_pairs=opts.min_pairs)]
    left = session.budget.remaining()
    best = max((session.prior(t).ratio for t in first + deferred), default=bar)
    confirm = (confirm_seconds(forecast(session.baseline, best) or opts.min_pairs, run_s, run_s)
               if first or deferred else 0.0)
    # alone against the baseline; then the other cheap tricks again on top of the path the first
    # one starts (--repeats pairs each: how many pay there is not known before measuring); then
    # the expensive ones on top of the path
    steps = ([(t, "alone") for t in order] + [(t, "again on the path") for t in order[1:]]
             + [(t, "on the path") for t in deferred])
    items, used = [], 0.0
    for trial, stage in steps:
        prior = session.prior(trial)
        pairs = forecast(trial, prior.ratio) if stage != "again on the path" else opts.min_pairs
        one = session.one_time(trial)
        seconds = (pairs or session.cap(trial)) * pair_s + one
        room = left - used - (confirm if stage != "alone" else 0.0)
        fits = seconds <= room
        why = ""
        if not fits:
            why = (f"{max(0.0, room):.0f} s would be left after the tricks before it"
                   + (" and the result's confirmation" if stage != "alone" else ""))
        else:
            used += seconds
        items.append(PlanItem(trial.name, prior, pairs, seconds, one, stage, fits, why))
    confirm_fits = confirm <= left - used
    return BudgetPlan(budget=opts.budget, survey_s=session.survey_s, run_s=run_s,
                      setup_s=base.setup_s if base.setup_s is not None else max(0.0, base.elapsed - measured
                                                                                 - sum(base.warmup_times)),
                      steps=session.steps, steps_why=session.steps_why, pair_s=pair_s, items=tuple(items),
                      confirm_s=confirm, confirm_fits=confirm_fits,
                      planned_s=session.budget.spent + used + (confirm if confirm_fits else 0.0))
