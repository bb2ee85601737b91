"""A tuning session: the options, the budget, the trials, and the paired measurements that
decide them (torch-free). :func:`pitstop.tune.protocol.search` runs its steps: the survey, the
single tricks (:meth:`TuneSession.measure_singles`), the stagewise path
(:func:`pitstop.tune.combine.combine`), the result.

How a comparison runs (:meth:`TuneSession.measure`): the reference (the baseline, or the path
so far) and the candidates as ``R C C R C C R ...``: the first candidate run after a reference
run pairs with it, the second with the reference run after it, so every candidate run is next
to a reference run. Each slot goes to the candidate the racing scheduler ranks first
(:mod:`pitstop.tune.schedule.racing`: expected gain per second of measuring), so a leader is driven to its
verdict before a long shot gets its second pair. A candidate leaves once its interval decided
(:func:`pitstop.paired.decide`), its loss trajectory is not equivalent, or its run failed, or
its pairs ran out (``max_pairs``; fewer for an expensive one). Under ``--budget`` a candidate is
started only when the seconds its verdict is forecast to take fit what is left (the budget
plan, :mod:`pitstop.tune.schedule.plan`, says so before measuring).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pitstop.paired import Pair, Sample, decide
from pitstop.tune.equivalence import check_runs
from pitstop.tune.explanation import explain_trial
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.schedule.listing import list_trials
from pitstop.tune.schedule.costs import first_run_guess, one_time_cost, run_estimate, startup_cost, steps_for
from pitstop.tune.options import Backend, Budget, TuneError, TuneOptions, merge_recipe_fields, select_knobs
from pitstop.tune.progress import NullProgress
from pitstop.tune.schedule.racing import Prior, log_ratios, more_for_verdict, pooled_noise, prior_for, prior_of, rank
from pitstop.tune.result import CombineStep, Run, ToDecide, Trial
from pitstop.stats import median
from pitstop.tune.verdict import verdict

__all__ = ["TuneSession", "failure_reason"]

_WHAT = {"crashed": "crashed", "timeout": "timed out", "oom": "ran out of memory", "error": "raised an error",
         "setup_error": "could not be applied (setup failed)", "too_few_steps": "stopped too early"}


#: pairs beyond ``--repeats`` an undecided expensive trial may get
EXPENSIVE_EXTRA_PAIRS = 2


def failure_reason(run: Run) -> str:
    return f"{_WHAT.get(run.status, run.status)}: {run.message}".strip()


class TuneSession:
    """One search: what it was given and everything it measured and decided so far."""

    def __init__(self, backend: Backend, knobs: Sequence[Knob], options: TuneOptions, *, progress: Any = None,
                 context: Context | None = None) -> None:
        self.backend, self.options = backend, options
        self.knobs = {(k.tip, k.name): k for k in knobs}
        self.selected = select_knobs(list(knobs), options.only)
        self.progress = progress or NullProgress()
        clock = getattr(backend, "budget_clock", None)  # a fake runner's clock (tests); else the wall clock
        self.budget = Budget(options.budget) if clock is None else Budget(options.budget, clock)
        self.ctx = context
        self.baseline = Trial(name="baseline")
        self.trials: list[Trial] = []          # single tricks, in catalog order
        self.not_applicable: list[Trial] = []
        self.combination: list[CombineStep] = []
        self.best: Trial | None = None
        self.stages: list = []                 # pitstop.tune.stages.Stage: the path, stage by stage
        self.notes: list[str] = []
        self.passes = 0
        self.survey_s = 0.0
        self.all_runs: list[Run] = []
        self.run_of: list[tuple[str, Run]] = []  # (configuration, run) in the order they ran
        self.steps = options.steps             # measured steps per run (more where set-up dominates)
        self.steps_why: str | None = None
        self.plan: Any = None                  # pitstop.tune.schedule.plan.BudgetPlan, made before measuring
        self.deferred: list[Trial] = []        # expensive tricks measured on top of the path, after the cheap
        self.reserve = 0.0                     # seconds kept apart (the result's confirmation)
        self.path_shares: dict[str, float] | None = None  # the survey's shares once the path runs
        self.spreads: list[list[float]] = []   # every candidate's log-ratios so far (noise extrapolations)
        self.not_started: dict[int, str] = {}  # id(trial) -> why the budget did not start it
        self.hopeless: dict[int, str] = {}     # id(trial) -> why it stopped undecided
        self._last: tuple[Trial, Sample] | None = None   # the most recent run, when it was a reference

    @property
    def expensive_pairs(self) -> int:
        """Pairs at most for an expensive (compiling) trial still undecided: more than the
        minimum, so that a 1.1x compile win is not decided by three pairs' luck, fewer than
        ``--max-pairs`` (each of its runs compiles)."""
        return min(self.options.most_pairs, self.options.min_pairs + EXPENSIVE_EXTRA_PAIRS)

    def cap(self, trial: Trial) -> int:
        return self.expensive_pairs if trial.expensive else self.options.most_pairs

    # -- configurations ------------------------------------------------------------------
    def knob(self, setting: Setting) -> Knob:
        return self.knobs[(setting.code, setting.knob)]

    def new_trial(self, settings: tuple[Setting, ...]) -> tuple[Trial, str | None]:
        """A trial of ``settings`` with its Recipe computed once; the second item names a
        conflict between two knobs' Recipe fields (the trial must not run then)."""
        from pitstop.engine.recipe import Recipe

        ks = [self.knob(s) for s in settings]
        fields, conflict = merge_recipe_fields([k.recipe_fields(s.value, self.ctx) for k, s in zip(ks, settings)])
        trial = Trial(name=" + ".join(s.label for s in settings) or "baseline", settings=settings,
                      recipe=None if conflict else Recipe.from_dict(fields), recipe_fields=fields,
                      reduced_precision=any(k.reduced_precision for k in ks), expensive=any(k.expensive for k in ks))
        return trial, conflict

    def prior(self, trial: Trial) -> Prior:
        """What ``trial``'s last setting (the trick it adds) is expected to give before any pair
        (:func:`pitstop.tune.schedule.racing.prior_for`)."""
        if not trial.settings:
            return prior_of(None)
        s = trial.settings[-1]
        return prior_for(self.knob(s), s.value, self.ctx, self.options.bench,
                         self.path_shares if len(trial.settings) > 1 else None)

    def _bench(self, code: str) -> float | None:
        device = self.ctx.device if self.ctx is not None else None
        return next((b.ratio for b in self.options.bench if b.code == code and b.device == device), None)

    def survey(self) -> None:
        """Observe the training once (unless a context was given) and list the trials
        (:func:`pitstop.tune.schedule.listing.list_trials`)."""
        started = self.budget.spent
        if self.ctx is None:
            self.ctx = self.backend.context()
        self.survey_s = self.budget.spent - started
        survey_run = getattr(self.backend, "survey_run", None)  # script mode: the survey as a run
        if callable(survey_run) and (run := survey_run()) is not None:
            self.adapt_steps(run)
        trials, left_out, notes = list_trials(self.selected, self.ctx, self.options, self.backend.mode, self.new_trial)
        self.trials += trials
        self.not_applicable += left_out
        self.notes += notes

    # -- runs ----------------------------------------------------------------------------
    def estimate(self, trial: Trial) -> float:
        """Seconds one more run of ``trial`` is expected to take, from the runs of its
        configuration so far (:func:`pitstop.tune.schedule.costs.run_estimate`)."""
        return run_estimate(self._same(trial), self.baseline, trial.expensive)

    def steady(self, trial: Trial) -> float:
        """Seconds a later run of ``trial`` should take (an expensive configuration's first run,
        its cold compilation, left out: :meth:`one_time` charges it once)."""
        runs = [r for r in self._same(trial) if r.ok]
        return run_estimate(runs[1:] if trial.expensive and len(runs) >= 2 else runs, self.baseline)

    def one_time(self, trial: Trial) -> float:
        """The one-time cost ``trial`` has still to pay (an expensive configuration's first run,
        before it ran)."""
        return first_run_guess(self.baseline) if trial.expensive and not self._same(trial) else 0.0

    def _same(self, trial: Trial) -> list[Run]:
        """The runs of ``trial``'s configuration so far, in the order they ran (a path's
        confirmation reruns the path's configuration)."""
        return [r for name, r in self.run_of if name == trial.name]

    def run(self, trial: Trial) -> Run | None:
        """One run of ``trial`` (appended to its runs); None when the budget cannot fit it."""
        if not self.budget.fits(self.estimate(trial) + self.reserve):
            return None
        timeout = self.options.timeout
        if self.budget.seconds is not None:
            timeout = max(1.0, min(timeout, self.budget.remaining() - self.reserve))
        self.progress.start(trial.knobs_label)
        knobs = list(self.knobs.values())
        run = self.backend.run(trial.settings, knobs, round=self.passes, timeout=timeout, steps=self.steps,
                               warmup=self.options.warmup)
        run.round = self.passes
        if run.status == "timeout" and timeout < self.options.timeout:
            run.budget_cut = True  # not the trick's failure: the budget cut its run short
            run.message += f" (the run's timeout was cut to {timeout:.0f} s by --budget)"
            self.budget.exhausted = True
        trial.runs.append(run)
        self.all_runs.append(run)
        self.run_of.append((trial.name, run))
        self.progress.advance()
        return run

    def _reference(self, ref: Trial) -> Sample | None:
        """A fresh reference sample (the last run's when that was this reference)."""
        if self._last is not None and self._last[0] is ref:
            return self._last[1]
        return self._run_reference(ref)

    def _run_reference(self, ref: Trial) -> Sample | None:
        run = self.run(ref)
        if run is None or run.budget_cut:
            return None
        if not run.ok:
            what = "the baseline" if not ref.settings else f"the combination {ref.name}"
            raise TuneError(f"{what} run failed, nothing can be tuned: {failure_reason(run)}"
                            + (f"\n{run.traceback}" if run.traceback else ""))
        sample = run.sample()
        self._last = (ref, sample)
        return sample

    def adapt_steps(self, run: Run) -> None:
        """Measured steps per run from the survey's ``run``: more where set-up dominates
        (:func:`pitstop.tune.schedule.costs.steps_for`); every run of the search measures as many."""
        if self.options.more_steps:
            self.steps, self.steps_why = steps_for(run, self.options.steps, self.budget.remaining())

    # -- paired, raced comparison ------------------------------------------------------------
    def measure(self, ref: Trial, candidates: Sequence[Trial], *, planned: bool = True,
                until: Any = None) -> dict[int, list[Pair]]:
        """Pairs of each candidate vs ``ref``, each run to the candidate the scheduler ranks
        first, until each one decides (module docs). ``planned=False`` (the result's
        confirmation): a candidate starts whenever its next run fits, forecast or not. ``until``
        (pairs -> bool): a decided candidate measures on, within its cap, while it says False."""
        pairs: dict[int, list[Pair]] = {id(c): [] for c in candidates}
        live = [c for c in candidates if c.failed is None]
        self.progress.total_add(2 * len(live) * self.options.min_pairs)
        before: Sample | None = None
        waiting = False  # a candidate ran right after `before`'s run and paired with it
        while live:
            # the next candidate, chosen before its reference runs: the budget must fit both
            fresh = not waiting and not (self._last is not None and self._last[0] is ref)
            cand = self._pick(ref, live, pairs, waiting or fresh, planned)
            if cand is None:
                break
            if not waiting:
                before = self._reference(ref)
                if before is None:
                    break
                self.passes += 1
            run = self.run(cand)
            if run is None or run.budget_cut:
                break
            self._last = None
            if run.ok and not waiting:   # R C1 C2 R: C1 pairs with the R before it ...
                pairs[id(cand)].append(Pair(before, run.sample()))
                waiting = True
            elif run.ok:                 # ... and C2 with the R after it
                after = self._run_reference(ref)
                if after is None:
                    break
                pairs[id(cand)].append(Pair(after, run.sample()))
                waiting = False
            best = self._fastest(candidates, pairs)
            live = [c for c in live if not (self._settled(ref, c, pairs[id(c)]) and (until is None or until(pairs[id(c)])))
                    and len(pairs[id(c)]) < self.cap(c) and not self._hopeless(c, pairs[id(c)], best)]
        self.spreads += [log_ratios(pairs[id(c)]) for c in candidates if len(pairs[id(c)]) >= 2]
        return pairs

    def _pick(self, ref: Trial, live: list[Trial], pairs: dict[int, list[Pair]], with_ref: bool,
              planned: bool = True) -> Trial | None:
        """The candidate of the next run (:func:`pitstop.tune.schedule.racing.rank`) that fits the budget,
        with a reference run when ``with_ref``. Under a budget a candidate not started yet starts
        only when the seconds its verdict is forecast to take fit what is left; one that cannot
        is left out, with why."""
        opts = self.options
        ref_s = self.estimate(ref)
        ranked = rank(live, logs=lambda c: log_ratios(pairs[id(c)]), prior=lambda c: self.prior(c).ratio,
                      pair_cost=lambda c: self.steady(c) + ref_s / 2, one_time=self.one_time, cap=self.cap,
                      bar=1 + opts.margin, confidence=opts.confidence, min_pairs=opts.min_pairs)
        left = self.budget.remaining() - self.reserve
        for cand, prospect in ranked:
            need = self.estimate(cand) + (ref_s if with_ref else 0.0)
            if pairs[id(cand)] or self.budget.seconds is None or not planned:
                if need <= left:
                    return cand
                continue
            if max(need, prospect.seconds + ref_s) <= left:
                return cand
            self.not_started[id(cand)] = (f"its verdict is forecast to take about {prospect.more} pairs "
                                          f"({prospect.seconds + ref_s:.0f} s); {max(0.0, left):.0f} s of the "
                                          "budget were left")
            live.remove(cand)
        if ranked:
            self.budget.exhausted = True
        return None

    def _settled(self, ref: Trial, cand: Trial, pairs: list[Pair]) -> bool:
        if cand.failed is not None:
            return True
        if self._loss_check(cand).passed is False:
            return True
        d = decide(pairs, margin=self.options.margin, confidence=self.options.confidence,
                   min_pairs=self.options.min_pairs, seed=self.options.seed)
        return d is not None and d.status != "undecided"

    def _fastest(self, cands: Sequence[Trial], pairs: dict[int, list[Pair]]) -> tuple[Trial, float] | None:
        """The candidate decided faster (and loss-equivalent) with the largest ratio, or None."""
        opts, out = self.options, None
        for c in cands:
            d = decide(pairs[id(c)], margin=opts.margin, confidence=opts.confidence, min_pairs=opts.min_pairs,
                       seed=opts.seed) if pairs[id(c)] else None
            if d is not None and d.status == "faster" and (out is None or d.ratio > out[1]) \
                    and self._loss_check(c).passed is not False:
                out = (c, d.ratio)
        return out

    def _hopeless(self, cand: Trial, pairs: list[Pair], best: tuple[Trial, float] | None) -> bool:
        """Undecided after ``--repeats`` pairs and either slower than the reference on their mean,
        or slower than a candidate decided faster (the path it starts measures it again on top):
        it stops, its remaining pairs go to tricks whose verdict can still change the result."""
        logs = log_ratios(pairs)
        if len(logs) < self.options.min_pairs:
            return False
        mean = sum(logs) / len(logs)
        if mean < 0:
            self.hopeless[id(cand)] = "stopped: slower on its pairs' mean, its remaining pairs went to tricks that could still be kept"
        elif best is not None and best[0] is not cand and mean < math.log(best[1]):
            self.hopeless[id(cand)] = (f"stopped: under {best[0].name} ({best[1]:.2f}x, decided faster), on top of "
                                       "which the path measures it again")
        return id(cand) in self.hopeless

    def _loss_check(self, trial: Trial) -> Any:
        """The trial's losses vs the baseline's over the first ``--warmup`` + ``--steps`` steps
        (the horizon the tolerances were measured on, whatever more steps a run measures)."""
        return check_runs(self.baseline.ok_runs, trial.ok_runs, reduced_precision=trial.reduced_precision,
                          horizon=self.options.warmup + self.options.steps)

    def judge(self, trial: Trial, pairs: list[Pair], *, against: str = "the baseline",
              reference: Trial | None = None) -> None:
        """Fill the trial's speed (vs the reference of ``pairs``: ``reference``, default the
        baseline), loss check, memory change, one-time cost and verdict."""
        opts = self.options
        failed = trial.failed
        if failed is not None:
            trial.status, trial.reason = "failed", failure_reason(failed)
            if len(trial.settings) == 1 and self.baseline.ok_runs:
                s = trial.settings[0]
                why = self.knob(s).unavailable(s.value, failed)
                if why:  # no kernel for it here: a measured fact about this machine, not the script failing
                    trial.status, trial.reason = "not_applicable", why
            return
        if not trial.ok_runs or not pairs:
            trial.status = "skipped"
            trial.reason = "not measured: " + self.not_started.get(
                id(trial), "the time budget was spent before it could run")
            trial.compile = one_time_cost(trial, self.baseline)
            return
        trial.speed = decide(pairs, margin=opts.margin, confidence=opts.confidence, min_pairs=opts.min_pairs,
                             seed=opts.seed)
        trial.base_steps_per_s = self.baseline.measured_steps_per_s if against == "the baseline" else None
        trial.loss_check = check = self._loss_check(trial)
        base_peaks = [r.peak_memory for r in self.baseline.ok_runs if r.peak_memory is not None]
        if trial.peak_memory is not None and base_peaks:
            trial.memory_change = trial.peak_memory - int(median(base_peaks) or 0)
        if not check.passed:
            trial.status, trial.reason = "rejected", f"not equivalent: {check.message}"
            return
        trial.status, trial.reason = verdict(trial.speed, opts.margin)
        if len(trial.settings) == 1:
            s = trial.settings[0]
            trial.hardware = self.knob(s).hardware_note(s.value, self.ctx, trial.speed)
        if trial.speed is not None and trial.speed.status == "undecided":
            trial.reason += f" ({self._undecided(trial, pairs)})"
        if check.status == "unchecked":
            trial.reason += "; loss not captured, equivalence unchecked"
        trial.compile = one_time_cost(trial, self.baseline, reference)
        trial.startup = startup_cost(trial, reference if reference is not None else self.baseline)
        explain_trial(trial, self.knob)

    def _undecided(self, trial: Trial, pairs: list[Pair]) -> str:
        """Why ``trial`` stayed undecided; when the budget stopped it, how many more pairs (and
        seconds) its pairs' spread says a verdict would take (``trial.to_decide``)."""
        opts = self.options
        if id(trial) in self.hopeless:
            return self.hopeless[id(trial)]
        if not self.budget.exhausted:
            return (f"an expensive trial gets {self.expensive_pairs} pairs" if trial.expensive
                    else f"--max-pairs {opts.most_pairs}")
        logs = log_ratios(pairs)
        more = more_for_verdict(logs, noise=pooled_noise(self.spreads + [logs]), bar=1 + opts.margin,
                                confidence=opts.confidence, min_pairs=opts.min_pairs)
        if more is None:
            return "not decided: time budget; its pairs sit on the bar"
        seconds = more * (self.steady(trial) + self.estimate(self.baseline) / 2)
        trial.to_decide = ToDecide(more, seconds)
        return f"not decided: time budget; about {more} more pairs ({seconds:.0f} s) would decide it"

    def measure_singles(self) -> None:
        """The first baseline run, the plan, then the single tricks vs the baseline, paired and
        raced; expensive tricks wait for the path (:func:`pitstop.tune.combine.combine`) unless
        no cheap trick is kept, or the bench measured one the best on this device."""
        from pitstop.tune.schedule.plan import make_plan

        if self._run_reference(self.baseline) is None:
            raise TuneError("the time budget ran out before the baseline could run")
        cheap = [t for t in self.trials if not t.expensive]
        best_cheap = max((self.prior(t).ratio for t in cheap), default=None)
        self.deferred = [t for t in self.trials if t.expensive and best_cheap is not None
                         and not (self._bench(t.settings[0].code) is not None and self.prior(t).ratio >= best_cheap)]
        first = [t for t in self.trials if t not in self.deferred]
        self.plan = make_plan(self, first, self.deferred)
        pairs = self.measure(self.baseline, first)
        for t in first:
            self.judge(t, pairs.get(id(t), []))
        if self.deferred and not any(t.status == "kept" for t in first):  # no path to put them on
            later, self.deferred = self.deferred, []
            pairs = self.measure(self.baseline, later)
            for t in later:
                self.judge(t, pairs.get(id(t), []))
