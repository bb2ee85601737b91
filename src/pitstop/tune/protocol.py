"""The tuning protocol, independent of how a configuration is run (torch-free).

1. **Survey**: the backend observes the training once (script mode: a short doctor run in
   full mode) and every registered knob says whether it applies and which values to try.
2. **Single tricks**, paired and adaptive (:class:`pitstop.tune.session.TuneSession`):
   every trial run is next to a baseline run; its pair ratio cancels the load both
   saw; a trial stops as soon as its interval over pairs decides (kept / slower / cannot
   reach the bar), the budget goes to the undecided. The clock decided on is the one the
   observed load does not distort (:func:`pitstop.paired.choose_measure`), shown with the
   verdict. A failing run (crash, timeout, out of memory, setup error) fails its trial; a
   run cut short by the budget does not.
3. **Verdicts** (:mod:`pitstop.tune.verdict`, :mod:`pitstop.tune.equivalence`): kept only
   when the interval lies above ``1 + margin`` and the loss trajectory is equivalent.
4. **Stagewise path** (:mod:`pitstop.tune.combine`): the remaining tricks measured again on
   top of each kept one until a stage adds nothing (the path, :mod:`pitstop.tune.stages`), then
   the whole path re-measured against the untouched baseline in fresh pairs until it decides
   (:mod:`pitstop.tune.confirm`): the claim in the recipe is never the choosing pairs'.
5. **Budget**: every run's timeout is capped by what is left of ``budget``; a run whose
   expected duration no longer fits is skipped and the result says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pitstop.tune.combine import combine
from pitstop.tune.knob import Context, Knob
from pitstop.tune.options import Backend, TuneOptions
from pitstop.tune.result import Trial, TuneResult
from pitstop.tune.search_info import BudgetUse, TuneSettings, script_warnings, time_split
from pitstop.tune.session import TuneSession

__all__ = ["search", "what_is_left", "budget_note"]


def search(backend: Backend, knobs: Sequence[Knob], options: TuneOptions, *, progress: Any = None,
           context: Context | None = None) -> TuneResult:
    """Run the whole protocol and return a :class:`TuneResult`."""
    from pitstop.machine import machine_load

    session = TuneSession(backend, knobs, options, progress=progress, context=context)
    loads = [machine_load()]
    session.survey()
    with session.progress:
        session.measure_singles()
        combine(session)
    loads.append(machine_load())
    return _result(session, loads)


#: phases no compute trick shortens: waiting for a DataLoader, preparing batches outside one
FEEDING = ("data", "host")


def what_is_left(session: TuneSession, best: Trial | None, *, least: float = 0.15) -> str | None:
    """The ceiling the script's batch feeding puts on any compute trick, when the survey saw
    it take at least ``least`` of the step and no trick of the best recipe changes it (the
    recipe's knobs say which phases they change): its share of the baseline step, its
    estimated share with the best recipe, and the speed-up the rest could give at most."""
    ctx = session.ctx
    # with manual parameter updates the doctor counts the update in ``host``: not feeding
    feeding = ("data",) if ctx is not None and ctx.step_boundary == "backward" else FEEDING
    share = ctx.share(feeding) if ctx is not None else None
    if share is None or share < least:
        return None
    touched: set[str] = set()
    for s in best.settings if best is not None else ():
        phases = session.knob(s).phases(s.value, ctx)
        if not phases:
            return None  # a trick that may change any phase: no estimate
        touched.update(phases)
    if touched & set(feeding):
        return None
    ratio = best.speed.ratio if best is not None and best.speed is not None else 1.0
    now = f"about {min(0.99, share * ratio):.0%} of the step with the best recipe, " if best is not None else ""
    return (f"what is left: feeding batches (DataLoader waits and batch preparation) took {share:.0%} of the "
            f"baseline step in the survey and no kept trick changes it: {now}so no compute trick can give more "
            f"than {1 / share:.1f}x here; speed up the batch pipeline itself (cheaper transforms, pre-processed "
            "data, DataLoader workers where spare cores exist)")


def budget_note(session: TuneSession) -> str:
    """What the budget left open: the tricks not decided, the leader (the fastest of them on its
    pairs so far) named with its interval and the budget its verdict would take, and the tricks
    the budget did not start."""
    opts = session.options
    open_ = [t for t in session.trials if t.speed is not None and t.speed.status == "undecided"]
    open_.sort(key=lambda t: -t.speed.ratio)
    parts = []
    for i, t in enumerate(open_):
        sp = t.speed
        text = f"{t.name} {sp.ratio:.2f}x [{sp.low:.2f}, {sp.high:.2f}] after {sp.pairs} pair{'s' * (sp.pairs != 1)}"
        if i == 0:
            text = "the leader " + text
        if t.to_decide is not None:
            more = t.to_decide.seconds
            text += (f"; about {t.to_decide.pairs} more pair{'s' * (t.to_decide.pairs != 1)} ({more:.0f} s) would "
                     f"decide it" + (f": --budget {opts.budget + more:.0f}" if i == 0 and opts.budget else ""))
        parts.append(text)
    skipped = [t.name for t in session.trials if t.status == "skipped"]
    return ("the time budget ran out" + (f"; not decided: {'; '.join(parts)}" if parts else "")
            + (f"; not measured: {', '.join(skipped)}" if skipped else ""))


def _result(session: TuneSession, loads: list) -> TuneResult:
    from pitstop.tune.knob import combined_snippet

    busy = [ld for ld in loads if ld is not None and ld[0] > ld[1]]
    notes = list(session.notes)
    passive = getattr(session.backend, "passive_omp", None)
    if passive:
        notes.append(passive)
    if busy:
        notes.append(f"the machine was busy while measuring (1-minute load average up to "
                     f"{max(b[0] for b in busy):.1f} on {busy[0][1]} cores): each verdict says which clock it was "
                     "decided on (CPU time when threads waited for cores)")
    if session.budget.exhausted:
        notes.append(budget_note(session))
    best = session.best
    for t in session.trials + ([best] if best is not None else []):  # the baseline as reported, after every run
        if t.base_steps_per_s is not None:
            t.base_steps_per_s = session.baseline.measured_steps_per_s
    snippet = combined_snippet([(session.knob(s), s.value) for s in best.settings], session.ctx) if best else ""
    if best is None and session.combination:
        notes.append("a trick measured faster when it was chosen did not hold in fresh pairs measured after the "
                     "choice (see the combination): keep the baseline; on a busy machine, measure again when it is "
                     "quieter")
    elif best is None:
        notes.append("no trick was measurably faster and loss-equivalent on this training: keep the baseline "
                     "(an honest result, not a failure)")
    left = what_is_left(session, best)
    if left:
        notes.append(left)
    base = session.baseline
    meds = [r.median_step for r in base.ok_runs if r.median_step]
    noise = max(meds) / min(meds) - 1 if len(meds) >= 2 else None
    worker = getattr(session.backend, "worker_kind", "in process" if session.backend.mode == "api" else "process")
    time = time_split(session.run_of, total=session.budget.spent, survey=session.survey_s, worker=worker)
    budget = BudgetUse(**session.budget.to_dict(), plan=session.plan)
    return TuneResult(mode=session.backend.mode, target=session.backend.target, device=session.ctx.device,
                      settings=TuneSettings(session.options), context=session.ctx, baseline=base,
                      trials=session.trials + session.not_applicable, combination=session.combination, best=best,
                      stages=session.stages,
                      best_recipe=best.recipe.to_dict() if best is not None else {}, snippet=snippet,
                      budget=budget, noise=noise, notes=notes, time=time,
                      script_warnings=script_warnings(session.all_runs))
