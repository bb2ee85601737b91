"""The greedy combination step of a :class:`pitstop.tune.session.TuneSession` (torch-free).

Starts from the fastest kept trick, then tries to add the best value of each other kept
knob, fastest first, then the *promising* ones (no gain alone but a point estimate above
1, loss-equivalent, not expensive: effects interact, e.g. on oneDNN channels_last pays most
under bf16), at most ``max_combine`` candidates. Each candidate is measured paired against
the current combination (:meth:`TuneSession.measure`, adaptive) and is added only when the
combination gets faster and stays loss-equivalent. Knobs whose Recipe fields conflict are
skipped. A combination of two or more tricks is then **re-measured against the baseline in
fresh pairs until it decides**: that speed-up is the one reported; when it does not hold,
the best single trick is the result. The caller's trials are never changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from pitstop.tune.result import CombineStep, Trial
from pitstop.tune.session import TuneSession
from pitstop.tune.verdict import verdict

__all__ = ["combine", "best_per_knob"]


def best_per_knob(trials: Sequence[Trial], status: str) -> list[Trial]:
    """The fastest trial of each knob among single-knob trials with ``status``."""
    best: dict[tuple[str, str], Trial] = {}
    for t in trials:
        if len(t.settings) != 1 or t.status != status or t.speed is None:
            continue
        if status == "no_gain" and (t.expensive or t.speed.ratio <= 1.0 or t.loss_check is None
                                    or not t.loss_check.passed):
            continue
        k = (t.settings[0].code, t.settings[0].knob)
        if k not in best or t.speed.ratio > best[k].speed.ratio:
            best[k] = t
    return sorted(best.values(), key=lambda t: -t.speed.ratio)


def combine(session: TuneSession) -> None:
    """Fill ``session.combination`` and ``session.best``."""
    kept = best_per_knob(session.trials, "kept")
    if not kept:
        return
    taken = {(t.settings[0].code, t.settings[0].knob) for t in kept}
    promising = [t for t in best_per_knob(session.trials, "no_gain")
                 if (t.settings[0].code, t.settings[0].knob) not in taken]
    first = kept[0]
    combo = session.new_trial(first.settings)[0]  # its runs as the reference here stay apart from the trial's
    steps = [CombineStep(first.name, "added", "fastest kept trick: starts the combination", first.speed)]
    for cand in (kept[1:] + promising)[: session.options.max_combine]:
        new, conflict = session.new_trial(combo.settings + cand.settings)
        if conflict:
            steps.append(CombineStep(cand.name, "skipped", f"conflicts with {combo.name}: {conflict}"))
            continue
        pairs = session.measure(combo, [new])[id(new)]
        session.judge(new, pairs, against=combo.name)
        if new.status in ("failed", "rejected", "skipped"):
            steps.append(CombineStep(cand.name, new.status, new.reason))
            if new.status == "skipped":
                break
            continue
        status, reason = verdict(new.speed, session.options.margin)
        if status == "kept":
            combo = new
            steps.append(CombineStep(cand.name, "added", f"vs {_prev(steps)}: {reason}",
                                     new.speed))
        else:
            steps.append(CombineStep(cand.name, status, f"not added: vs the combination so far: {reason}", new.speed))
    best = first
    if len(combo.settings) > 1:
        final, _ = session.new_trial(combo.settings)
        final.runs = list(combo.runs)
        pairs = session.measure(session.baseline, [final])[id(final)]
        final.runs = final.runs[len(combo.runs):]  # fresh pairs only
        session.judge(final, pairs)
        if final.status == "kept":
            best = final
            steps.append(CombineStep(final.name, "confirmed", f"re-measured against the baseline in "
                                                              f"{final.speed.pairs} fresh pairs: {final.reason}",
                                     final.speed))
        else:
            steps.append(CombineStep(final.name, "not_confirmed",
                                     f"re-measured against the baseline: {final.reason}; the best single trick "
                                     f"({first.name}) is the result", final.speed))
    session.combination, session.best = steps, best


def _prev(steps: Sequence[CombineStep]) -> str:
    added = [s.added for s in steps if s.status == "added"]
    return " + ".join(added)
