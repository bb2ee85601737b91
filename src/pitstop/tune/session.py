"""A tuning session: the options, the budget, the trials, and the paired measurements that
decide them (torch-free). :func:`pitstop.tune.protocol.search` runs its steps: the survey, the
single tricks (:meth:`TuneSession.measure`), the greedy combination
(:func:`pitstop.tune.combine.combine`), the result.

How a comparison runs (:meth:`TuneSession.measure`): in *passes*; a pass runs the reference
(the baseline, or the current combination) and the undecided candidates two at a time,
``R C1 C2 R C3 C4 R ...``, in an order that rotates from pass to pass (expensive candidates
last), so every candidate run is next to a reference run. Each candidate run gives one
:class:`pitstop.paired.Pair` (its adjacent reference run vs itself). After each pass a
candidate whose interval decided (:func:`pitstop.paired.decide`), whose loss trajectory is
not equivalent, or whose run failed leaves; the budget goes to the undecided ones, up to
``max_pairs`` pairs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from pitstop.paired import Pair, Sample, decide
from pitstop.tune.equivalence import check_losses
from pitstop.tune.explanation import explain_trial
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.options import Backend, Budget, TuneError, TuneOptions, merge_recipe_fields, select_knobs
from pitstop.tune.progress import NullProgress
from pitstop.tune.result import CombineStep, CompileCost, Run, Trial
from pitstop.tune.search_info import ScriptWarnings
from pitstop.stats import median
from pitstop.tune.verdict import verdict

__all__ = ["TuneSession", "failure_reason", "script_warnings"]

_WHAT = {"crashed": "crashed", "timeout": "timed out", "oom": "ran out of memory", "error": "raised an error",
         "setup_error": "could not be applied (setup failed)", "too_few_steps": "stopped too early"}


#: pairs beyond ``--repeats`` an undecided expensive trial may get
EXPENSIVE_EXTRA_PAIRS = 2


def failure_reason(run: Run) -> str:
    return f"{_WHAT.get(run.status, run.status)}: {run.message}".strip()


def _rotate(items: list, r: int) -> list:
    if not items:
        return items
    r %= len(items)
    return items[r:] + items[:r]


class TuneSession:
    """One search: what it was given and everything it measured and decided so far."""

    def __init__(self, backend: Backend, knobs: Sequence[Knob], options: TuneOptions, *, progress: Any = None,
                 context: Context | None = None) -> None:
        self.backend, self.options = backend, options
        self.knobs = {(k.tip, k.name): k for k in knobs}
        self.selected = select_knobs(list(knobs), options.only)
        self.progress = progress or NullProgress()
        self.budget = Budget(options.budget)
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
        self._last: tuple[Trial, Sample] | None = None   # the most recent run, when it was a reference

    @property
    def expensive_pairs(self) -> int:
        """Pairs at most for an expensive (compiling) trial still undecided: more than the
        minimum, so that a 1.1x compile win is not decided by three pairs' luck, fewer than
        ``--max-pairs`` (each of its runs compiles)."""
        return min(self.options.most_pairs, self.options.min_pairs + EXPENSIVE_EXTRA_PAIRS)

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

    def survey(self) -> None:
        """Observe the training once (unless a context was given) and list the trials."""
        started = self.budget.spent
        if self.ctx is None:
            self.ctx = self.backend.context()
        self.survey_s = self.budget.spent - started
        for knob in self.selected:
            na = _not_applicable(knob, self.ctx, self.backend.mode)
            if na is not None:
                self.not_applicable.append(na)
                continue
            values = list(knob.values(self.ctx))
            values += [v for v in self.options.asked(knob) if v not in values]
            for value, why in knob.not_tried(self.ctx).items():
                if value not in values:  # left out by the knob's choice: a note says why
                    self.notes.append(f"{knob.tip} {knob.label(value)} not tried: {why} (to measure it anyway: "
                                      f"--try {knob.name}={value})")
            for value in values:
                setting = knob.setting(value)
                blocked = knob.cannot_run(value, self.ctx)
                if blocked is not None:
                    self.not_applicable.append(Trial(name=setting.label, settings=(setting,), status="not_applicable",
                                                     reason=blocked, expensive=knob.expensive))
                    continue
                small = _too_small(knob, value, self.ctx, self.options.margin)
                if small is not None:
                    self.not_applicable.append(Trial(name=setting.label, settings=(setting,), status="not_applicable",
                                                     reason=small, bounded=True, expensive=knob.expensive))
                    continue
                self.trials.append(self.new_trial((setting,))[0])

    # -- runs ----------------------------------------------------------------------------
    def _estimate(self, trial: Trial) -> float:
        own = [r.elapsed for r in trial.runs if r.ok]
        if own:
            return median(own) or 0.0
        guess = median([r.elapsed for r in self.baseline.runs if r.ok]) or 0.0
        return guess * (3.0 if trial.expensive else 1.0)

    def run(self, trial: Trial) -> Run | None:
        """One run of ``trial`` (appended to its runs); None when the budget cannot fit it."""
        if not self.budget.fits(self._estimate(trial)):
            return None
        timeout = self.options.timeout
        if self.budget.seconds is not None:
            timeout = max(1.0, min(timeout, self.budget.remaining()))
        self.progress.start(trial.knobs_label)
        knobs = list(self.knobs.values())
        run = self.backend.run(trial.settings, knobs, round=self.passes, timeout=timeout, steps=self.options.steps,
                               warmup=self.options.warmup)
        run.round = self.passes
        if run.status == "timeout" and timeout < self.options.timeout:
            run.budget_cut = True  # not the trick's failure: the budget cut its run short
            run.message += f" (the run's timeout was cut to {timeout:.0f} s by --budget)"
            self.budget.exhausted = True
        trial.runs.append(run)
        self.all_runs.append(run)
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

    # -- paired, adaptive comparison ---------------------------------------------------------
    def measure(self, ref: Trial, candidates: Sequence[Trial]) -> dict[int, list[Pair]]:
        """Pairs of each candidate vs ``ref``, in passes until each one decides (module docs)."""
        opts = self.options
        pairs: dict[int, list[Pair]] = {id(c): [] for c in candidates}
        live = [c for c in candidates if c.failed is None]
        self.progress.total_add(2 * len(live) * opts.min_pairs + 1)
        for n in range(opts.most_pairs):
            if not live:
                break
            if n >= opts.min_pairs:
                self.progress.total_add(2 * len(live))
            cheap = [c for c in live if not c.expensive]
            order = _rotate(cheap, n) + [c for c in live if c.expensive]
            before = self._reference(ref)
            if before is None:
                break
            waiting: Trial | None = None   # ran right after `before`'s run, pairs with it
            for i, cand in enumerate(order):
                run = self.run(cand)
                if run is None or run.budget_cut:
                    break
                self._last = None
                if not run.ok:
                    continue
                if waiting is None and i < len(order) - 1:  # R C1 C2 R: C1 pairs with the R before it
                    pairs[id(cand)].append(Pair(before, run.sample()))
                    waiting = cand
                    continue
                after = self._run_reference(ref)     # ... and C2 with the R after it
                if after is None:
                    break
                pairs[id(cand)].append(Pair(after, run.sample()))
                before, waiting = after, None
            self.passes += 1
            live = [c for c in live if not self._settled(ref, c, pairs[id(c)])
                    and not (c.expensive and len(pairs[id(c)]) >= self.expensive_pairs)]  # compiling costs
            if self.budget.exhausted:
                break
        return pairs

    def _settled(self, ref: Trial, cand: Trial, pairs: list[Pair]) -> bool:
        if cand.failed is not None:
            return True
        if self._loss_check(cand).passed is False:
            return True
        d = decide(pairs, margin=self.options.margin, confidence=self.options.confidence,
                   min_pairs=self.options.min_pairs, seed=self.options.seed)
        return d is not None and d.status != "undecided"

    def _loss_check(self, trial: Trial) -> Any:
        base, mine = self.baseline.ok_runs, trial.ok_runs
        ranks = min((len(r.rank_losses) for r in base + mine), default=0)
        if ranks < 2:
            return check_losses([r.losses for r in base], [r.losses for r in mine],
                                reduced_precision=trial.reduced_precision)
        checks = [check_losses([r.rank_losses[k] for r in base], [r.rank_losses[k] for r in mine],
                               reduced_precision=trial.reduced_precision) for k in range(ranks)]  # every rank's
        k = next((k for k, c in enumerate(checks) if not c.passed), None)
        if k is None:
            k = max(range(ranks), key=lambda i: checks[i].deviation or 0.0)
        return replace(checks[k], message=f"rank {k} of {ranks} (the worst): {checks[k].message}")

    def judge(self, trial: Trial, pairs: list[Pair], *, against: str = "the baseline") -> None:
        """Fill the trial's speed (vs the reference of ``pairs``), loss check, memory change
        and verdict."""
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
            trial.reason = "not measured: the time budget was spent before it could run"
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
            why = ("time budget" if self.budget.exhausted else
                   f"an expensive trial gets {self.expensive_pairs} pairs" if trial.expensive
                   else f"--max-pairs {opts.most_pairs}")
            trial.reason += f" ({why})"
        if check.status == "unchecked":
            trial.reason += "; loss not captured, equivalence unchecked"
        _compile_cost(trial, self.baseline)
        explain_trial(trial, self.knob)

    def measure_singles(self) -> None:
        """Every single trick vs the baseline, paired and adaptive."""
        pairs = self.measure(self.baseline, self.trials)
        if not self.baseline.ok_runs:
            run = self._run_reference(self.baseline)  # nothing ran (no trials): one baseline run at least
            if run is None:
                raise TuneError("the time budget ran out before the baseline could run")
        for t in self.trials:
            self.judge(t, pairs.get(id(t), []))


def _compile_cost(trial: Trial, baseline: Trial) -> None:
    """For expensive trials (compilation): the one-off cost, apart from steady-state speed
    (the warmup steps' time beyond the steady step time), and after how many steps it pays
    off -- only when the trial is kept (a trial that is not faster never pays off)."""
    if not trial.expensive:
        return
    overheads = []
    for r in trial.ok_runs:  # in the order they ran: the first paid a cold compile
        med = r.median_step
        if med is not None and r.warmup_times:
            overheads.append(max(0.0, sum(r.warmup_times) - med * len(r.warmup_times)))
    if not overheads:
        return
    base, mine = baseline.median_step, trial.median_step
    saved = None
    if trial.status == "kept" and base is not None and trial.speed is not None:
        saved = base - base / trial.speed.ratio
    elif trial.status == "kept" and base is not None and mine is not None:
        saved = base - mine
    trial.compile = CompileCost(overheads[0], min(overheads[1:]) if overheads[1:] else None,
                                math.ceil(overheads[0] / saved) if saved and saved > 0 else None)


#: the survey's phase shares come from a couple of steps: a value is left unmeasured only when
#: this many times its phases' share, removed entirely, could not reach the bar
SHARE_SAFETY = 2.0


def _too_small(knob: Knob, value: object, ctx: Context, margin: float) -> str | None:
    """Why ``value`` is not worth measuring (Amdahl: the phases it can speed up are too small
    a share of the step to reach ``1 + margin`` even if they took no time), or None."""
    phases = knob.phases(value, ctx)
    share = ctx.share(phases) if phases else None
    if share is None:
        return None
    best = 1 / max(1e-9, 1 - min(0.999, SHARE_SAFETY * share))
    if best >= 1 + margin:
        return None
    return (f"{' + '.join(phases)} {share:.1%} of the step (survey): even {SHARE_SAFETY:g}x that, removed "
            f"entirely, gives at most {best:.3f}x, under the {1 + margin:.2f}x bar: not measured")


def _not_applicable(knob: Knob, ctx: Context, mode: str) -> Trial | None:
    reason = None
    if knob.memory_role is not None:
        reason = ("memory knob: it makes no step faster; the batch-size sweep of pitstop.tune(...) (API mode) "
                  "uses it") if mode == "script" else "memory knob: used by the batch-size sweep"
    elif mode not in knob.modes:
        reason = f"not available in {mode} mode" + (" (use pitstop.tune(...) on an engine training)" if "api" in knob.modes else "")
    else:
        app = knob.applies(ctx)
        if not app:
            reason = app.reason
    if reason is None:
        return None
    return Trial(name=knob.name, settings=(Setting(knob.tip, knob.name, None, knob.name),), status="not_applicable",
                 reason=reason)


def script_warnings(runs: Sequence[Run]) -> ScriptWarnings | None:
    """What the script wrote to stderr over all runs, deduplicated: ``lines`` in all,
    ``distinct`` lines, the ``first`` few distinct ones (None when it wrote nothing)."""
    lines = [ln for r in runs for ln in r.stderr_lines]
    if not lines:
        return None
    distinct = list(dict.fromkeys(ln.strip() for ln in lines if ln.strip()))
    return ScriptWarnings(lines=len(lines), distinct=len(distinct), first=distinct[:3])
