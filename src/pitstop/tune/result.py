"""What a tuning search measured and decided: plain, JSON-able records (torch-free).

- :class:`Run`: one run of one configuration (a child process in script mode, an
  in-process loop in API mode): per-step wall times, per-step losses, peak memory, status.
- :class:`Trial`: one configuration (the baseline, a single trick, or a combination), its
  runs, the speed comparison with the baseline, the loss check and the verdict.
- :class:`TuneResult`: the whole search: baseline, trials, the greedy combination steps and
  the best combination with its :class:`pitstop.Recipe` fields and snippet; what the search
  ran with and what it cost are in :mod:`pitstop.tune.search_info`.

JSON schema (``TuneResult.to_dict()``; every key always present, ``null`` when unknown)::

    {"schema": "pitstop.tune/1", "mode": "script"|"api", "target": str, "device": str,
     "settings": {"steps", "warmup", "repeats", "budget", "margin", "confidence", "timeout", "try_values", ...},
     "context": {...},                        # what the knobs were chosen from
     "baseline": {"steps_per_s", "samples_per_s", "step_time", "noise", "runs", "run_step_times",
                  "peak_memory", "batch_size", "loss"},
     "trials": [{"name", "knobs": [{"code", "knob", "value", "label"}], "status", "reason",
                 "steps_per_s", "samples_per_s", "speedup": {"ratio", "low", "high",
                 "confidence", "rounds_won", "rounds"} | null,
                 "memory_change", "loss_check": {"status", "deviation", "tolerance",
                 "message"} | null, "compile": {"compile_s", "compile_s_cached",
                 "break_even_steps"} | null, "explanation": str | null (the knob's facts of its runs,
                 e.g. graph breaks and recompiles), "recipe": {...changed Recipe fields...}, "runs": int,
                 "run_step_times": [median step seconds of each run],
                 "hardware": {"feature", "cpu", "missing", "slowdown", "text"} | null,
                 "to_decide": {"pairs", "seconds"} | null (undecided when the budget ran out: what a verdict
                 would take), "against": str | null (an expensive trick measured on top of this path, not
                 alone against the baseline), "startup": {"extra_s", "break_even_steps"} | null (a cheap
                 trick's warm-up beyond its reference's, paid by every run: worker start-up, algorithm search)}],
     "combination": [{"added", "status", "reason", "speedup_vs_previous"}],
     "stages": [{"stage", "trick", "knobs", "speedup_vs_previous" (vs the previous stage), "cumulative"
                 (over the baseline: the product of the stages' ratios), "clock", "reason", "in_recipe"}],
     "best": {"knobs", "recipe" (Recipe.to_dict()), "recipe_changed", "speedup",
              "steps_per_s", "loss_check", "snippet", "framework": {"framework", "target", "kwargs",
              "code", "unsupported", "snippet"} | null (the detected framework's form), "measured"},
     "sweep": {...} | null,                   # API mode batch-size sweep
     "budget": {"seconds", "spent", "exhausted", "plan": {"budget", "survey_s", "run_s", "setup_s", "steps",
                "steps_why", "pair_s", "items": [{"trick", "prior": {"ratio", "source"}, "pairs", "seconds",
                "one_time_s", "stage", "fits", "why"}], "confirm_s", "planned_s"} | null (made before measuring)},
     "time": {"total", "survey", "setup", "warmup", "measured", "other", "runs", "worker",
              "trials": [{"trial", "runs", "elapsed", "setup", "warmup", "measured", "other",
                          "split": {"start", "imports", "build", "first_step", "compile"} | null}]},
     "notes": [str]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from pitstop.jsoncodec import to_json
from pitstop.paired import Decision
from pitstop.tune.equivalence import LossCheck
from pitstop.tune.knob import Context, Setting
from pitstop.tune.run import FAILED_STATUSES, OK, Run, RunStatus
from pitstop.tune.stages import Stage
from pitstop.tune.search_info import BudgetUse, ScriptWarnings, TimeSplit, TuneSettings
from pitstop.tune.verdict import STATUSES, TrialStatus

if TYPE_CHECKING:
    from pitstop.engine.export import FrameworkConfig
    from pitstop.engine.recipe import Recipe
    from pitstop.tune.sweep import SweepResult

__all__ = ["Run", "Trial", "TuneResult", "CombineStep", "CompileCost", "StartupCost", "ToDecide", "STATUSES", "OK", "FAILED_STATUSES", "SCHEMA",
           "TrialStatus", "RunStatus", "CombineStatus", "COMBINE_STATUSES"]

SCHEMA = "pitstop.tune/1"

#: Steps of the greedy combination (:class:`CombineStep`): a trial status, ``added``, or the
#: final re-measurement's ``confirmed`` / ``not_confirmed`` / ``unconfirmed`` (budget ran out).
CombineStatus = Literal["added", "no_gain", "slower", "rejected", "failed", "skipped", "confirmed", "not_confirmed",
                        "unconfirmed"]
COMBINE_STATUSES: tuple[CombineStatus, ...] = get_args(CombineStatus)


@dataclass(frozen=True)
class CompileCost:
    """One-off cost of an expensive trial (compilation): ``compile_s`` of the first (cold)
    run, ``compile_s_cached`` of the cheapest later one, and after how many steps it pays
    off (only for a trial that is faster)."""

    compile_s: float
    compile_s_cached: float | None
    break_even_steps: int | None


@dataclass(frozen=True)
class StartupCost:
    """What a trick adds to every run before its steady steps, beyond its reference's warm-up
    (DataLoader workers starting, cuDNN's algorithm search): ``extra_s``, the median over its
    runs, and after how many steps it pays off (only for a trick decided faster)."""

    extra_s: float
    break_even_steps: int | None


@dataclass(frozen=True)
class ToDecide:
    """What a trial the budget left undecided would need: ``pairs`` more (extrapolated from its
    pairs' spread against its distance to the bar) and about ``seconds`` of budget for them."""

    pairs: int
    seconds: float


@dataclass
class Trial:
    """One configuration: the baseline (no settings), one knob value, or a combination.

    ``speed`` (:class:`pitstop.paired.Decision`), ``loss_check``
    (:class:`pitstop.tune.equivalence.LossCheck`), ``recipe`` (:class:`pitstop.Recipe`) and
    ``compile`` (:class:`CompileCost`) stay typed objects until :meth:`to_dict`."""

    name: str
    settings: tuple[Setting, ...] = ()
    runs: list[Run] = field(default_factory=list)
    status: TrialStatus = "skipped"
    reason: str = ""
    speed: Decision | None = None                 # vs the baseline
    loss_check: LossCheck | None = None
    memory_change: int | None = None              # bytes vs the baseline's peak
    compile: CompileCost | None = None
    explanation: str | None = None                # the knob's facts of its runs (pitstop.tune.explanation)
    recipe: Recipe | None = None                  # the Recipe with the trial's fields (None: baseline)
    recipe_fields: dict[str, Any] = field(default_factory=dict)   # the fields it changes
    reduced_precision: bool = False
    expensive: bool = False
    base_steps_per_s: float | None = None         # the baseline's, for the steps/s the speed-up implies
    hardware: Any = None                          # pitstop.machine.HardwareNote: the machine explains its speed
    bounded: bool = False                         # left unmeasured alone: its phases' survey share could not reach the bar
    to_decide: ToDecide | None = None             # undecided when the budget ran out: what a verdict would take
    startup: StartupCost | None = None            # its warm-up beyond its reference's (a cheap trick's one-time cost)
    against: str | None = None                    # measured against this path, not the baseline (None: the baseline)

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed(self) -> Run | None:
        return next((r for r in self.runs if not r.ok and not r.budget_cut), None)

    @property
    def step_times(self) -> list[float]:
        return [t for r in self.ok_runs for t in r.step_times]

    @property
    def median_step(self) -> float | None:
        from pitstop.stats import quantile

        times = self.step_times
        return quantile(times, 0.5) if times else None

    @property
    def measured_steps_per_s(self) -> float | None:
        """Wall-clock steps/s of its own runs (under whatever load each run saw)."""
        m = self.median_step
        return 1.0 / m if m else None

    @property
    def steps_per_s(self) -> float | None:
        """The baseline's steps/s times the paired speed-up: never contradicts the speed-up
        column (its own runs' wall rate is :attr:`measured_steps_per_s`)."""
        if self.speed is not None and self.base_steps_per_s:
            return self.base_steps_per_s * self.speed.ratio
        return self.measured_steps_per_s

    @property
    def speedup(self) -> dict[str, Any] | None:
        return self.speed.to_dict() if self.speed is not None else None

    @property
    def batch_size(self) -> int | None:
        return next((r.batch_size for r in self.ok_runs if r.batch_size), None)

    @property
    def samples_per_s(self) -> float | None:
        sps, bs = self.steps_per_s, self.batch_size
        return sps * bs if sps and bs else None

    @property
    def peak_memory(self) -> int | None:
        from pitstop.stats import quantile

        peaks = [r.peak_memory for r in self.ok_runs if r.peak_memory is not None]
        return int(quantile(peaks, 0.5)) if peaks else None

    @property
    def knobs_label(self) -> str:
        return " + ".join(s.label for s in self.settings) or "baseline"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "knobs": [s.to_dict() for s in self.settings], "status": self.status,
                "reason": self.reason, "steps_per_s": _num(self.steps_per_s), "samples_per_s": _num(self.samples_per_s),
                "measured_steps_per_s": _num(self.measured_steps_per_s),
                "speedup": self.speedup, "memory_change": self.memory_change,
                "loss_check": self.loss_check.to_dict() if self.loss_check is not None else None,
                "compile": to_json(self.compile),
                "explanation": self.explanation,
                "recipe": dict(self.recipe_fields), "runs": len(self.runs),
                "run_step_times": [_num(r.median_step) for r in self.runs],
                "peak_memory": self.peak_memory,
                "hardware": self.hardware.to_dict() if self.hardware is not None else None,
                "to_decide": to_json(self.to_decide), "against": self.against,
                "startup": to_json(self.startup)}


@dataclass(frozen=True)
class CombineStep:
    """One step of the greedy combination: ``added`` to the combination (``status``
    ``added``), not (``no_gain``, ``slower``, ``rejected``, ``failed``, ``skipped``), or the
    final re-measurement of the whole combination against the baseline (``confirmed`` /
    ``not_confirmed``). ``speed``: a :class:`pitstop.paired.Decision` vs the previous
    combination (vs the baseline for the final step)."""

    added: str
    status: CombineStatus
    reason: str
    speed: Decision | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"added": self.added, "status": self.status, "reason": self.reason,
                "speedup_vs_previous": self.speed.to_dict() if self.speed is not None else None}


@dataclass
class TuneResult:
    mode: str
    target: str
    device: str
    settings: TuneSettings
    context: Context
    baseline: Trial
    trials: list[Trial] = field(default_factory=list)
    combination: list[CombineStep] = field(default_factory=list)
    best: Trial | None = None
    stages: list[Stage] = field(default_factory=list)   # the path: each trick on top of the last
    best_recipe: dict[str, Any] = field(default_factory=dict)     # Recipe.to_dict()
    snippet: str = ""
    sweep: SweepResult | None = None
    budget: BudgetUse | None = None
    noise: float | None = None         # the baseline's own run-to-run spread (reported, not a bar)
    notes: list[str] = field(default_factory=list)
    time: TimeSplit | None = None
    script_warnings: ScriptWarnings | None = None

    def trial(self, name: str) -> Trial:
        for t in self.trials:
            if t.name == name:
                return t
        raise KeyError(name)

    def by_code(self, code: str) -> list[Trial]:
        """Single-knob trials of one tip code."""
        return [t for t in self.trials if len(t.settings) == 1 and t.settings[0].code == code]

    @property
    def kept(self) -> list[Trial]:
        return [t for t in self.trials if t.status == "kept"]

    def recipe(self):
        """The best combination as a :class:`pitstop.Recipe` (the default recipe when
        nothing was kept)."""
        from pitstop.engine.recipe import Recipe

        return Recipe.from_dict(self.best_recipe) if self.best_recipe else Recipe()

    @property
    def baseline_steps_per_s(self) -> float | None:
        """The baseline's wall-clock steps/s of its own runs (None when not measured)."""
        return _num(self.baseline.measured_steps_per_s)

    @property
    def baseline_samples_per_s(self) -> float | None:
        return _num(self.baseline.samples_per_s)

    @property
    def best_steps_per_s(self) -> float | None:
        """The best configuration's steps/s (the baseline's when nothing was kept)."""
        return _num(self.best.steps_per_s) if self.best is not None else self.baseline_steps_per_s

    def recipe_changed(self) -> dict[str, Any]:
        """The fields of :meth:`recipe` that differ from the default :class:`pitstop.Recipe`."""
        from pitstop.engine.recipe import Recipe

        default = Recipe().to_dict()
        return {k: v for k, v in self.recipe().to_dict().items() if v != default[k]}

    def framework_config(self) -> FrameworkConfig | None:
        """The best recipe in the detected framework's options (:mod:`pitstop.engine.export`),
        or None (no framework detected, or nothing changed)."""
        framework = self.context.framework
        recipe = self.recipe()
        if not framework or not recipe.changed():
            return None
        from pitstop.engine.export import export

        return export(recipe, framework)

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline
        best = self.best
        recipe = self.recipe()
        cfg = self.framework_config()
        return {
            "schema": SCHEMA,
            "mode": self.mode,
            "target": self.target,
            "device": self.device,
            "settings": self.settings.to_dict(self.mode),
            "context": self.context.to_dict(),
            "baseline": {
                "steps_per_s": self.baseline_steps_per_s, "samples_per_s": self.baseline_samples_per_s,
                "step_time": _num(base.median_step), "noise": _num(self.noise), "runs": len(base.runs),
                "run_step_times": [_num(r.median_step) for r in base.runs],
                "peak_memory": base.peak_memory, "batch_size": base.batch_size,
                "loss": _median_trajectory(base),
            },
            "trials": [t.to_dict() for t in self.trials],
            "combination": [c.to_dict() for c in self.combination],
            "stages": [s.to_dict() for s in self.stages],
            "best": {
                "knobs": [s.to_dict() for s in best.settings] if best else [],
                "recipe": recipe.to_dict(),
                "recipe_changed": self.recipe_changed(),
                "speedup": best.speedup if best else None,
                "steps_per_s": self.best_steps_per_s,
                "loss_check": best.loss_check.to_dict() if best and best.loss_check is not None else None,
                "snippet": self.snippet,
                "framework": {**cfg.to_dict(), "snippet": cfg.snippet()} if cfg is not None else None,
                "measured": bool(best and best.runs),
            },
            "sweep": to_json(self.sweep),
            "budget": to_json(self.budget) if self.budget is not None else {},
            "time": to_json(self.time),
            "script_warnings": to_json(self.script_warnings),
            "notes": list(self.notes),
        }


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _median_trajectory(trial: Trial) -> list[float | None]:
    from pitstop.tune.equivalence import median_trajectory

    return median_trajectory([r.losses for r in trial.ok_runs])
