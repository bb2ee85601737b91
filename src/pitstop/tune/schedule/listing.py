"""Which trials a survey lists (torch-free): every selected knob's values that apply to the
training, minus those that cannot run and those whose step phases are too small a share of the
step to reach the bar (Amdahl, on the survey's breakdown); each left out with why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.options import TuneOptions
from pitstop.tune.result import Trial

__all__ = ["SHARE_SAFETY", "list_trials", "too_small", "not_applicable"]

#: the survey's phase shares come from a couple of steps: a value is left unmeasured only when
#: this many times its phases' share, removed entirely, could not reach the bar
SHARE_SAFETY = 2.0


def list_trials(knobs: Sequence[Knob], ctx: Context, options: TuneOptions, mode: str,
                new_trial: Callable[[tuple[Setting, ...]], Any]) -> tuple[list[Trial], list[Trial], list[str]]:
    """``(trials, not_applicable, notes)`` for ``knobs`` on ``ctx``: the single tricks to
    measure (``new_trial((setting,))[0]`` each), those left out with the reason, and notes on
    values a knob does not try here by default."""
    trials: list[Trial] = []
    left_out: list[Trial] = []
    notes: list[str] = []
    for knob in knobs:
        na = not_applicable(knob, ctx, mode)
        if na is not None:
            left_out.append(na)
            continue
        values = list(knob.values(ctx))
        values += [v for v in options.asked(knob) if v not in values]
        for value, why in knob.not_tried(ctx).items():
            if value not in values:  # left out by the knob's choice: a note says why
                notes.append(f"{knob.tip} {knob.label(value)} not tried: {why} (to measure it anyway: "
                             f"--try {knob.name}={value})")
        for value in values:
            setting = knob.setting(value)
            blocked = knob.cannot_run(value, ctx)
            if blocked is not None:
                left_out.append(Trial(name=setting.label, settings=(setting,), status="not_applicable",
                                      reason=blocked, expensive=knob.expensive))
                continue
            small = too_small(knob, value, ctx, options.margin)
            if small is not None:
                left_out.append(Trial(name=setting.label, settings=(setting,), status="not_applicable",
                                      reason=small, bounded=True, expensive=knob.expensive))
                continue
            trials.append(new_trial((setting,))[0])
    return trials, left_out, notes


def too_small(knob: Knob, value: object, ctx: Context, margin: float) -> str | None:
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


def not_applicable(knob: Knob, ctx: Context, mode: str) -> Trial | None:
    """The knob as a ``not_applicable`` trial with the reason, or None when it applies."""
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
