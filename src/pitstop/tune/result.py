"""What a tuning search measured and decided: plain, JSON-able records (torch-free).

- :class:`Run`: one run of one configuration (a child process in script mode, an
  in-process loop in API mode): per-step wall times, per-step losses, peak memory, status.
- :class:`Trial`: one configuration (the baseline, a single trick, or a combination), its
  runs, the speed comparison with the baseline, the loss check and the verdict.
- :class:`TuneResult`: the whole search: baseline, trials, the greedy combination steps and
  the best combination with its :class:`pitstop.Recipe` fields and snippet.

JSON schema (``TuneResult.to_dict()``; every key always present, ``null`` when unknown)::

    {"schema": "pitstop.tune/1", "mode": "script"|"api", "target": str, "device": str,
     "settings": {"steps", "warmup", "repeats", "budget", "margin", "confidence", "timeout"},
     "context": {...},                        # what the knobs were chosen from
     "baseline": {"steps_per_s", "samples_per_s", "step_time", "noise", "runs", "run_step_times",
                  "peak_memory", "batch_size", "loss"},
     "trials": [{"name", "knobs": [{"code", "knob", "value", "label"}], "status", "reason",
                 "steps_per_s", "samples_per_s", "speedup": {"ratio", "low", "high",
                 "confidence", "rounds_won", "rounds"} | null,
                 "memory_change", "loss_check": {"status", "deviation", "tolerance",
                 "message"} | null, "compile": {"compile_s", "compile_s_cached",
                 "break_even_steps"} | null, "recipe": {...changed Recipe fields...}, "runs": int,
                 "run_step_times": [median step seconds of each run]}],
     "combination": [{"added", "status", "reason", "speedup_vs_previous"}],
     "best": {"knobs", "recipe" (Recipe.to_dict()), "recipe_changed", "speedup",
              "steps_per_s", "loss_check", "snippet", "framework": {"framework", "target", "kwargs",
              "code", "unsupported", "snippet"} | null (the detected framework's form), "measured"},
     "sweep": {...} | null,                   # API mode batch-size sweep
     "budget": {"seconds", "spent", "exhausted"}, "notes": [str]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pitstop.tune.knob import Setting

__all__ = ["Run", "Trial", "TuneResult", "STATUSES", "OK", "FAILED_STATUSES", "SCHEMA"]

SCHEMA = "pitstop.tune/1"

#: Verdicts of a trial. ``kept``: faster beyond the noise and equivalent; ``no_gain``: not
#: measurably faster (an honest, normal result); ``slower``: measurably slower;
#: ``rejected``: the loss trajectory is not equivalent (diverged, NaN); ``failed``: a run
#: crashed, hung (timeout), ran out of memory, or its setup failed; ``not_applicable``: the
#: knob cannot change this training (with the reason); ``skipped``: not measured (budget,
#: conflict with a kept trick).
STATUSES = ("kept", "no_gain", "slower", "rejected", "failed", "not_applicable", "skipped")
OK = "ok"
#: How a run can fail.
FAILED_STATUSES = ("crashed", "timeout", "oom", "error", "setup_error", "too_few_steps")


@dataclass
class Run:
    """One run of one configuration."""

    status: str                                   # "ok" or one of FAILED_STATUSES
    step_times: list[float] = field(default_factory=list)    # observed steps, seconds
    warmup_times: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)  # every step, warmup first
    peak_memory: int | None = None                # bytes (CUDA max allocated / peak RSS / tracked)
    batch_size: int | None = None
    elapsed: float = 0.0                          # seconds, the whole run (startup included)
    round: int = -1                               # which interleaved round it belongs to
    message: str = ""
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def median_step(self) -> float | None:
        from pitstop.stats import quantile

        return quantile(self.step_times, 0.5) if self.step_times else None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "step_times": list(self.step_times), "warmup_times": list(self.warmup_times),
                "losses": list(self.losses), "peak_memory": self.peak_memory, "batch_size": self.batch_size,
                "elapsed": self.elapsed, "round": self.round, "message": self.message, "traceback": self.traceback}


@dataclass
class Trial:
    """One configuration: the baseline (no settings), one knob value, or a combination."""

    name: str
    settings: tuple[Setting, ...] = ()
    runs: list[Run] = field(default_factory=list)
    status: str = "skipped"
    reason: str = ""
    speedup: dict[str, Any] | None = None         # ratio, low, high, confidence, rounds_won, rounds
    loss_check: dict[str, Any] | None = None      # status, deviation, tolerance, message
    memory_change: int | None = None              # bytes vs the baseline's peak
    compile: dict[str, Any] | None = None         # compile_s, break_even_steps
    recipe: dict[str, Any] = field(default_factory=dict)
    reduced_precision: bool = False
    expensive: bool = False

    @property
    def ok_runs(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def failed(self) -> Run | None:
        return next((r for r in self.runs if not r.ok), None)

    @property
    def step_times(self) -> list[float]:
        return [t for r in self.ok_runs for t in r.step_times]

    @property
    def median_step(self) -> float | None:
        from pitstop.stats import quantile

        times = self.step_times
        return quantile(times, 0.5) if times else None

    @property
    def steps_per_s(self) -> float | None:
        m = self.median_step
        return 1.0 / m if m else None

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
                "speedup": self.speedup, "memory_change": self.memory_change, "loss_check": self.loss_check,
                "compile": self.compile, "recipe": dict(self.recipe), "runs": len(self.runs),
                "run_step_times": [_num(r.median_step) for r in self.runs],
                "peak_memory": self.peak_memory}


@dataclass
class TuneResult:
    mode: str
    target: str
    device: str
    settings: dict[str, Any]
    context: dict[str, Any]
    baseline: Trial
    trials: list[Trial] = field(default_factory=list)
    combination: list[dict[str, Any]] = field(default_factory=list)
    best: Trial | None = None
    best_recipe: dict[str, Any] = field(default_factory=dict)     # Recipe.to_dict()
    snippet: str = ""
    sweep: dict[str, Any] | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    noise: float | None = None
    notes: list[str] = field(default_factory=list)

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

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline
        best = self.best
        from pitstop.engine.recipe import Recipe

        recipe = self.recipe()
        return {
            "schema": SCHEMA,
            "mode": self.mode,
            "target": self.target,
            "device": self.device,
            "settings": dict(self.settings),
            "context": dict(self.context),
            "baseline": {
                "steps_per_s": _num(base.steps_per_s), "samples_per_s": _num(base.samples_per_s),
                "step_time": _num(base.median_step), "noise": _num(self.noise), "runs": len(base.runs),
                "run_step_times": [_num(r.median_step) for r in base.runs],
                "peak_memory": base.peak_memory, "batch_size": base.batch_size,
                "loss": _median_trajectory(base),
            },
            "trials": [t.to_dict() for t in self.trials],
            "combination": list(self.combination),
            "best": {
                "knobs": [s.to_dict() for s in best.settings] if best else [],
                "recipe": recipe.to_dict(),
                "recipe_changed": {k: v for k, v in recipe.to_dict().items() if v != Recipe().to_dict()[k]},
                "speedup": best.speedup if best else None,
                "steps_per_s": _num(best.steps_per_s) if best else _num(base.steps_per_s),
                "loss_check": best.loss_check if best else None,
                "snippet": self.snippet,
                "framework": _framework_config(recipe, self.context),
                "measured": bool(best and best.runs),
            },
            "sweep": self.sweep,
            "budget": dict(self.budget),
            "notes": list(self.notes),
        }


def _framework_config(recipe: Any, context: dict[str, Any]) -> dict[str, Any] | None:
    """The recipe in the detected framework's options (:mod:`pitstop.engine.export`), or None."""
    framework = (context or {}).get("framework")
    if not framework or not recipe.changed():
        return None
    from pitstop.engine.export import export

    cfg = export(recipe, framework)
    return {**cfg.to_dict(), "snippet": cfg.snippet()}


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _median_trajectory(trial: Trial) -> list[float | None]:
    from pitstop.tune.equivalence import median_trajectory

    return median_trajectory([r.losses for r in trial.ok_runs])
