"""The tuning protocol, independent of how a configuration is run (torch-free).

1. **Context**: the backend observes the training once (script mode: a short doctor run in
   full mode) and every registered knob says whether it applies and which values to try.
2. **Rounds**: ``repeats`` rounds; each runs the baseline and every trial once, in an order
   that rotates from round to round (expensive trials such as compilation last). The
   baseline runs at least twice: its run-to-run spread is the noise floor. A trial whose
   run fails (crash, timeout, out of memory, setup error) is reported ``failed`` and not
   run again; the search goes on.
3. **Verdicts** (:mod:`pitstop.tune.verdict`, :mod:`pitstop.tune.equivalence`): kept only
   when faster beyond the noise, in every round, and loss-equivalent.
4. **Greedy combination**: the best value of each kept knob, fastest first, then the
   "promising" ones (no gain alone, but not slower, equivalent and cheap to try: effects
   interact, e.g. channels_last pays most under bf16 on oneDNN), are added one at a time. Each step runs rounds of (baseline, current combination, combination + candidate);
   the candidate stays only if the combination gets faster beyond the noise and stays
   equivalent. Knobs that set the same :class:`pitstop.Recipe` field differently conflict.
5. **Budget**: every run's timeout is capped by what is left of ``budget``; a run whose
   expected duration no longer fits is skipped and the result says so.

The same configuration measured in several phases pools its runs (rounds pair them with
the baseline runs of the same round).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pitstop.tune.equivalence import check_losses
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.result import Run, Trial, TuneResult
from pitstop.tune.verdict import DEFAULT_CONFIDENCE, DEFAULT_MARGIN, compare, median, noise_floor, speed_verdict

__all__ = ["TuneOptions", "Backend", "TuneError", "Budget", "search", "select_knobs", "merge_recipe_fields"]


class TuneError(RuntimeError):
    """The search cannot start or cannot go on (the baseline itself fails)."""


@dataclass(frozen=True)
class TuneOptions:
    steps: int = 10                  # observed optimizer steps per run
    warmup: int = 3                  # optimizer steps before measuring (compilation, caches)
    repeats: int = 3                 # rounds (the baseline runs max(repeats, 2) times)
    budget: float | None = None      # seconds for the whole search
    timeout: float = 300.0           # seconds for one run
    margin: float = DEFAULT_MARGIN   # required speed-up beyond the noise
    confidence: float = DEFAULT_CONFIDENCE
    only: tuple[str, ...] = ()       # tip codes or knob names; empty: every knob
    max_combine: int = 4             # candidates tried in the greedy phase
    seed: int = 0

    def __post_init__(self) -> None:
        for name, low in (("steps", 1), ("warmup", 0), ("repeats", 1), ("max_combine", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout!r}")
        if not 0 <= self.margin < 10:
            raise ValueError(f"margin must be in [0, 10), got {self.margin!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "warmup": self.warmup, "repeats": self.repeats, "budget": self.budget,
                "timeout": self.timeout, "margin": self.margin, "confidence": self.confidence,
                "only": list(self.only), "max_combine": self.max_combine, "seed": self.seed}


class Backend(Protocol):
    """How configurations run: :class:`pitstop.tune.script.ScriptBackend` (child processes)
    or :class:`pitstop.tune.api.ApiBackend` (in process, through ``make_step``)."""

    mode: str
    target: str

    def context(self) -> Context: ...

    def run(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, round: int, timeout: float,
            steps: int, warmup: int) -> Run: ...


class Budget:
    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.exhausted = False

    @property
    def spent(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.spent

    def fits(self, estimate: float) -> bool:
        ok = self.remaining() >= estimate
        if not ok:
            self.exhausted = True
        return ok

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "spent": round(self.spent, 3), "exhausted": self.exhausted}


def _matches(knob: Knob, only: Sequence[str]) -> bool:
    return not only or any(o.upper() == knob.tip or o.lower() == knob.name for o in only)


def select_knobs(knobs: Sequence[Knob], only: Sequence[str]) -> list[Knob]:
    """Knobs selected by ``only`` (tip codes or knob names); ValueError naming an unknown one."""
    unknown = [o for o in only if not any(o.upper() == k.tip or o.lower() == k.name for k in knobs)]
    if unknown:
        known = ", ".join(sorted({k.tip for k in knobs} | {k.name for k in knobs}))
        raise ValueError(f"--only: no knob for {', '.join(map(repr, unknown))}; knobs: {known}")
    return [k for k in knobs if _matches(k, only)]


def merge_recipe_fields(parts: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """Merge the Recipe fields of several settings; the second item names a conflict."""
    merged: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if k in merged and merged[k] != v:
                return merged, f"both set Recipe.{k} ({merged[k]!r} vs {v!r})"
            merged[k] = v
    return merged, None


def _key(settings: Sequence[Setting]) -> tuple:
    return tuple(sorted((s.code, s.knob, repr(s.value)) for s in settings))


@dataclass
class _State:
    backend: Backend
    knobs: dict[tuple[str, str], Knob]
    options: TuneOptions
    budget: Budget
    progress: Any
    runs: dict[tuple, list[Run]] = field(default_factory=dict)
    rounds: int = 0
    notes: list[str] = field(default_factory=list)
    stopped: dict[tuple, int] = field(default_factory=dict)   # config -> runs when it stopped early

    def knob_list(self) -> list[Knob]:
        return list(self.knobs.values())

    def estimate(self, trial: Trial, baseline: Trial) -> float:
        own = [r.elapsed for r in self.runs.get(_key(trial.settings), [])]
        if own:
            return median(own) or 0.0
        base = [r.elapsed for r in baseline.runs]
        guess = median(base) if base else 0.0
        return (guess or 0.0) * (3.0 if trial.expensive else 1.0)

    def run_one(self, trial: Trial, baseline: Trial, round_id: int, *, force: bool = False) -> Run | None:
        if not force and not self.budget.fits(self.estimate(trial, baseline)):
            return None
        timeout = self.options.timeout
        if self.budget.seconds is not None and not force:
            timeout = max(1.0, min(timeout, self.budget.remaining()))
        self.progress.start(trial.knobs_label)
        run = self.backend.run(trial.settings, self.knob_list(), round=round_id, timeout=timeout,
                               steps=self.options.steps, warmup=self.options.warmup)
        run.round = round_id
        if run.status == "timeout" and self.budget.seconds is not None and timeout < self.options.timeout:
            run.message += f" (the run's timeout was cut to {timeout:.0f} s by --budget)"
        trial.runs.append(run)  # trial.runs is the pooled list of its configuration
        self.progress.advance()
        return run


def _new_trial(settings: tuple[Setting, ...], knobs: dict[tuple[str, str], Knob], ctx: Context) -> Trial:
    parts = [knobs[(s.code, s.knob)].recipe_fields(s.value, ctx) for s in settings]
    recipe, _ = merge_recipe_fields(parts)
    ks = [knobs[(s.code, s.knob)] for s in settings]
    name = " + ".join(s.label for s in settings) or "baseline"
    return Trial(name=name, settings=settings, recipe=recipe, reduced_precision=any(k.reduced_precision for k in ks),
                 expensive=any(k.expensive for k in ks))


def _run_failure_reason(run: Run) -> str:
    what = {"crashed": "crashed", "timeout": "timed out", "oom": "ran out of memory", "error": "raised an error",
            "setup_error": "could not be applied (setup failed)", "too_few_steps": "stopped too early"}
    return f"{what.get(run.status, run.status)}: {run.message}".strip()


def _decide(trial: Trial, baseline_runs: Sequence[Run], state: _State, noise: float) -> None:
    """Fill speedup, loss check, memory change and the verdict of a measured trial."""
    opts = state.options
    failed = trial.failed
    if failed is not None:
        trial.status, trial.reason = "failed", _run_failure_reason(failed)
        return
    if not trial.ok_runs:
        trial.status = "skipped"
        trial.reason = "not run: the time budget was spent before it could run"
        return
    speed = compare(baseline_runs, trial.ok_runs, confidence=opts.confidence, seed=opts.seed)
    trial.speedup = speed.to_dict() if speed else None
    check = check_losses([r.losses for r in baseline_runs if r.ok], [r.losses for r in trial.ok_runs],
                         reduced_precision=trial.reduced_precision)
    trial.loss_check = check.to_dict()
    base_peaks = [r.peak_memory for r in baseline_runs if r.ok and r.peak_memory is not None]
    if trial.peak_memory is not None and base_peaks:
        trial.memory_change = trial.peak_memory - int(median(base_peaks) or 0)
    _compile_stats(trial, baseline_runs)
    if not check.passed:
        trial.status, trial.reason = "rejected", f"not equivalent: {check.message}"
        return
    trial.status, trial.reason = speed_verdict(speed, noise, opts.margin)
    short = len(trial.ok_runs) < opts.repeats
    if _key(trial.settings) in state.stopped:
        trial.reason += f" (not repeated after {state.stopped[_key(trial.settings)]} round(s): over 2x slower)"
    elif short:
        trial.reason += f" (measured in {len(trial.ok_runs)} of {opts.repeats} rounds: time budget)"
    if check.status == "unchecked":
        trial.reason += "; loss not captured, equivalence unchecked"


def _compile_stats(trial: Trial, baseline_runs: Sequence[Run]) -> None:
    """For expensive trials (compilation): the one-off cost, apart from steady-state speed,
    and after how many steps it pays off. The cost is the warmup steps' time beyond the
    steady step time; ``compile_s`` is the first (cold) run's, ``compile_s_cached`` the
    cheapest later run's (PyTorch's on-disk compile cache makes repeated compiles cheaper)."""
    if not trial.expensive:
        return
    overheads = []
    for r in trial.ok_runs:  # in the order they ran: the first paid a cold compile
        med = r.median_step
        if med is not None and r.warmup_times:
            overheads.append(max(0.0, sum(r.warmup_times) - med * len(r.warmup_times)))
    if not overheads:
        return
    compile_s = overheads[0]
    base = median([t for r in baseline_runs if r.ok for t in r.step_times])
    mine = trial.median_step
    saved = (base - mine) if base is not None and mine is not None else None
    trial.compile = {"compile_s": compile_s, "compile_s_cached": min(overheads[1:]) if overheads[1:] else None,
                     "break_even_steps": math.ceil(compile_s / saved) if saved and saved > 0 else None}


def _rotate(items: list, r: int) -> list:
    if not items:
        return items
    r %= len(items)
    return items[r:] + items[:r]


def _clearly_slower(state: _State, trial: Trial, baseline: Trial) -> bool:
    """Stop repeating a trial that is dramatically slower (interval entirely below half the
    bar, e.g. fp16 emulated on a CPU): more rounds would only spend the budget. Smaller
    slowdowns are measured in every round, like everything else (a load burst can fake them)."""
    if not trial.ok_runs or not baseline.ok_runs:
        return False
    speed = compare(baseline.ok_runs, trial.ok_runs, confidence=state.options.confidence, seed=state.options.seed)
    bar = (1 + noise_floor(baseline.ok_runs)) * (1 + state.options.margin)
    return speed is not None and speed.high < 1 / (2 * bar)


def _rounds(state: _State, configs: list[Trial], baseline: Trial, repeats: int) -> None:
    """Run ``repeats`` rounds of ``configs`` (the baseline among them), rotating the order;
    a config whose run failed is not run again, nor one already clearly slower."""
    cheap = [c for c in configs if not c.expensive]
    dear = [c for c in configs if c.expensive]
    for r in range(repeats):
        round_id = state.rounds
        state.rounds += 1
        for cfg in _rotate(cheap, r) + dear:
            if cfg.failed is not None:
                continue
            if cfg is not baseline and _key(cfg.settings) in state.stopped:
                state.progress.advance()
                continue
            if cfg is not baseline and r > 0 and _clearly_slower(state, cfg, baseline):
                state.stopped[_key(cfg.settings)] = len(cfg.ok_runs)
                state.progress.advance()
                continue
            run = state.run_one(cfg, baseline, round_id)
            if run is None:
                state.notes.append(f"time budget: {cfg.name} not run in round {round_id + 1}")
            elif cfg is baseline and not run.ok:
                raise TuneError(f"the baseline run failed, nothing can be tuned: {_run_failure_reason(run)}"
                                + (f"\n{run.traceback}" if run.traceback else ""))


def search(backend: Backend, knobs: Sequence[Knob], options: TuneOptions, *, progress: Any = None,
           context: Context | None = None) -> TuneResult:
    """Run the whole protocol and return a :class:`TuneResult`."""
    from pitstop.tune.progress import NullProgress

    from pitstop.tune.context import machine_load

    progress = progress or NullProgress()
    budget = Budget(options.budget)
    loads = [machine_load()]
    ctx = context if context is not None else backend.context()
    selected = select_knobs(list(knobs), options.only)
    index = {(k.tip, k.name): k for k in knobs}
    state = _State(backend, index, options, budget, progress)

    trials, not_applicable = [], []
    for knob in selected:
        na = _not_applicable(knob, ctx, backend.mode)
        if na is not None:
            not_applicable.append(na)
            continue
        for value in knob.values(ctx):
            trials.append(_new_trial((knob.setting(value),), index, ctx))
    baseline = Trial(name="baseline")
    state.runs[_key(())] = baseline.runs
    for t in trials:
        state.runs[_key(t.settings)] = t.runs

    repeats = options.repeats
    progress.total(max(repeats, 2) + len(trials) * repeats)
    with progress:
        _rounds(state, [baseline, *trials], baseline, repeats)
        while len(baseline.ok_runs) < 2:  # the noise floor needs two baseline runs
            run = state.run_one(baseline, baseline, state.rounds, force=True)
            state.rounds += 1
            if not run.ok:
                raise TuneError(f"the baseline run failed, nothing can be tuned: {_run_failure_reason(run)}")
        noise = noise_floor(baseline.ok_runs)
        for t in trials:
            _decide(t, baseline.ok_runs, state, noise)
        from pitstop.tune.combine import combine

        combination, best = combine(state, trials, baseline, ctx, noise)
    for t in not_applicable:
        trials.append(t)
    loads.append(machine_load())
    busy = [ld for ld in loads if ld is not None and ld[0] > ld[1]]
    if busy:
        state.notes.append(f"the machine was busy while measuring (1-minute load average up to "
                           f"{max(b[0] for b in busy):.1f} on {busy[0][1]} cores): other processes compete for "
                           "the cores, so timings are noisy and speed-ups can be hidden; re-run on a quiet machine")
    best_trial = best if best is not None and best.settings else None
    if best_trial is not None and best_trial.status != "kept":
        state.notes.append(f"{best_trial.name} was kept at first but its speed-up did not hold up once re-measured "
                           f"in the combination rounds ({best_trial.reason}): no recipe is recommended")
        best_trial = None
    recipe_fields = dict(best_trial.recipe) if best_trial else {}
    from pitstop.engine.recipe import Recipe

    best_recipe = Recipe.from_dict(recipe_fields).to_dict() if recipe_fields else Recipe().to_dict()
    from pitstop.tune.snippet import combined_snippet

    snippet = combined_snippet([(index[(s.code, s.knob)], s.value) for s in best_trial.settings], ctx) if best_trial else ""
    if not any(t.status == "kept" for t in trials):
        state.notes.append("no trick was measurably faster than the noise and loss-equivalent on this training: "
                           "keep the baseline (an honest result, not a failure)")
    return TuneResult(mode=backend.mode, target=backend.target, device=ctx.device, settings=options.to_dict(),
                      context=ctx.to_dict(), baseline=baseline, trials=trials, combination=combination,
                      best=best_trial, best_recipe=best_recipe, snippet=snippet, budget=budget.to_dict(),
                      noise=noise, notes=state.notes)


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
