"""The greedy combination of kept tricks (step 4 of :mod:`pitstop.tune.search`; torch-free).

The best value of each kept knob, fastest first, then the *promising* knobs (not
significantly faster alone but not slower either, loss-equivalent, not expensive to try;
best point estimate first), at most ``max_combine`` candidates. Effects interact: on
oneDNN channels_last pays most under bf16, and workers only once the compute got shorter. Each step runs interleaved rounds of (baseline, current
combination, combination + candidate); the candidate stays when the combination gets
faster than the current one beyond the noise and stays equivalent to the baseline.
Candidates whose Recipe fields conflict with the combination's are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pitstop.tune.knob import Context
from pitstop.tune.result import Trial
from pitstop.tune.search import _decide, _key, _new_trial, _rounds, _State, merge_recipe_fields
from pitstop.tune.verdict import compare, speed_verdict

__all__ = ["combine"]


def _best_per_knob(trials: Sequence[Trial], status: str) -> list[Trial]:
    best: dict[tuple[str, str], Trial] = {}
    for t in trials:
        if len(t.settings) != 1 or t.status != status or not t.speedup:
            continue
        if status == "no_gain" and (t.expensive or t.loss_check and t.loss_check["status"] not in ("ok", "unchecked")):
            continue
        k = (t.settings[0].code, t.settings[0].knob)
        if k not in best or t.speedup["ratio"] > best[k].speedup["ratio"]:
            best[k] = t
    return sorted(best.values(), key=lambda t: -t.speedup["ratio"])


def combine(state: _State, trials: list[Trial], baseline: Trial, ctx: Context, noise: float
             ) -> tuple[list[dict[str, Any]], Trial | None]:
    kept = _best_per_knob(trials, "kept")
    if not kept:
        return [], None
    kept_knobs = {(t.settings[0].code, t.settings[0].knob) for t in kept}
    promising = [t for t in _best_per_knob(trials, "no_gain") if (t.settings[0].code, t.settings[0].knob) not in kept_knobs]
    candidates = (kept[1:] + promising)[: state.options.max_combine]
    combo = kept[0]
    log: list[dict[str, Any]] = [{"added": combo.name, "status": "kept", "reason": "fastest kept trick: starts the combination",
                                  "speedup_vs_previous": combo.speedup}]
    for cand in candidates:
        settings = combo.settings + cand.settings
        parts = [state.knobs[(s.code, s.knob)].recipe_fields(s.value, ctx) for s in settings]
        _, conflict = merge_recipe_fields(parts)
        if conflict:
            log.append({"added": cand.name, "status": "skipped", "reason": f"conflicts with {combo.name}: {conflict}",
                        "speedup_vs_previous": None})
            continue
        new = _new_trial(settings, state.knobs, ctx)
        state.runs.setdefault(_key(new.settings), new.runs)
        new.runs = state.runs[_key(new.settings)]
        state.progress.total_add(3 * state.options.repeats)
        _rounds(state, [baseline, combo, new], baseline, state.options.repeats)
        _decide(combo, baseline.ok_runs, state, noise)
        _decide(new, baseline.ok_runs, state, noise)
        if new not in trials:
            trials.append(new)
        if new.status == "failed":
            log.append({"added": cand.name, "status": "failed", "reason": new.reason, "speedup_vs_previous": None})
            continue
        if not new.ok_runs:
            log.append({"added": cand.name, "status": "skipped", "reason": "time budget spent", "speedup_vs_previous": None})
            break
        step = compare(combo.ok_runs, new.ok_runs, confidence=state.options.confidence, seed=state.options.seed)
        status, reason = speed_verdict(step, noise, state.options.margin)
        if new.status == "rejected":
            status, reason = "rejected", new.reason
        ratio = f"{step.ratio:.2f}x [{step.low:.2f}, {step.high:.2f}] " if step else ""
        entry = {"added": cand.name, "status": status, "reason": f"{ratio}vs {combo.name}: {reason}",
                 "speedup_vs_previous": step.to_dict() if step else None}
        log.append(entry)
        if status == "kept" and new.status == "kept":
            combo = new
        elif new.status == "kept":
            new.status, new.reason = "no_gain", f"not faster than {combo.name} alone: {reason}"
    return log, combo
