"""The greedy combination step of a :class:`pitstop.tune.session.TuneSession` (torch-free).

Starts from the fastest kept trick. The candidates are the best value of each other kept
knob, then the *promising* ones (no gain alone but a point estimate above 1,
loss-equivalent: effects interact, e.g. on oneDNN channels_last pays most under bf16, and a
fused optimizer matters more once the forward is faster), at most ``max_combine``.

1. **Cheap candidates, in rounds**: every candidate is added to the current combination and
   all of them are measured *together* against it (one :meth:`TuneSession.measure`: the
   reference runs are shared, ``R C1 C2 R C3 ...``, so a round costs about a third less than
   one comparison per candidate). The fastest one that is decided faster (and stays
   loss-equivalent) is added; those not faster on top of the combination are dropped; the
   other faster ones are measured again, on top of the new combination, in the next round.
2. **Expensive candidates** (compilation) last, each once, against the final cheap
   combination: the comparison that matters, and no compile run is spent twice.
3. The result is **re-measured against the baseline in fresh pairs until it decides**
   (:mod:`pitstop.tune.confirm`; a single trick too: the best of several noisy trials is
   biased upward): that speed-up is the one reported; when a combination does not hold, the
   best single trick is confirmed the same way; when that does not hold either, nothing is
   recommended.

Knobs whose Recipe fields conflict are skipped. The caller's trials are never changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from pitstop.tune.confirm import confirm
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


class _Greedy:
    """The combination so far and the steps that explain it."""

    def __init__(self, session: TuneSession, first: Trial) -> None:
        self.session = session
        self.combo = session.new_trial(first.settings)[0]  # its runs as the reference stay apart from the trial's
        self.steps = [CombineStep(first.name, "added", "fastest kept trick: starts the combination", first.speed)]
        self.stopped = False  # the budget ran out

    def _with(self, cands: Sequence[Trial]) -> list[tuple[Trial, Trial]]:
        """(candidate, combination + candidate) for each candidate that does not conflict."""
        out = []
        for cand in cands:
            new, conflict = self.session.new_trial(self.combo.settings + cand.settings)
            if conflict:
                self.steps.append(CombineStep(cand.name, "skipped", f"conflicts with {self.combo.name}: {conflict}"))
            else:
                out.append((cand, new))
        return out

    def round(self, cands: Sequence[Trial]) -> list[Trial]:
        """Measure ``cands`` on top of the combination together; add the fastest faster one;
        return the other faster ones (to try again on top of the new combination)."""
        tried = self._with(cands)
        if not tried:
            return []
        pairs = self.session.measure(self.combo, [new for _, new in tried])
        faster: list[tuple[Trial, Trial]] = []
        for cand, new in tried:
            self.session.judge(new, pairs[id(new)], against=self.combo.name)
            if new.status in ("failed", "rejected", "skipped"):
                self.steps.append(CombineStep(cand.name, new.status, new.reason))
                self.stopped |= new.status == "skipped"
                continue
            status, reason = verdict(new.speed, self.session.options.margin)
            if status == "kept":
                faster.append((cand, new))
            else:
                self.steps.append(CombineStep(cand.name, status, f"not added: vs {self.combo.name}: {reason}",
                                              new.speed))
        if not faster:
            return []
        faster.sort(key=lambda cn: -cn[1].speed.ratio)
        cand, new = faster[0]
        _, reason = verdict(new.speed, self.session.options.margin)
        self.steps.append(CombineStep(cand.name, "added", f"vs {self.combo.name}: {reason}", new.speed))
        self.combo = new
        return [c for c, _ in faster[1:]]

    def confirm(self, first: Trial) -> Trial | None:
        """The result, confirmed in fresh pairs against the baseline (:func:`pitstop.tune.confirm.confirm`):
        the combination; when it does not hold, the best single trick; else None."""
        chosen = [self.combo] if len(self.combo.settings) >= 2 else []
        for trial in chosen + [first]:
            final, step = confirm(self.session, trial)
            self.steps.append(step)
            if final is not None:
                return final
        return None


def combine(session: TuneSession) -> None:
    """Fill ``session.combination`` and ``session.best``."""
    kept = best_per_knob(session.trials, "kept")
    if not kept:
        return
    taken = {(t.settings[0].code, t.settings[0].knob) for t in kept}
    promising = [t for t in best_per_knob(session.trials, "no_gain")
                 if (t.settings[0].code, t.settings[0].knob) not in taken]
    first, greedy = kept[0], _Greedy(session, kept[0])
    cands = (kept[1:] + promising)[: session.options.max_combine]
    cheap = [c for c in cands if not c.expensive]
    while cheap and not greedy.stopped:
        cheap = greedy.round(cheap)
    for cand in (c for c in cands if c.expensive):
        if greedy.stopped:
            break
        greedy.round([cand])
    session.combination, session.best = greedy.steps, greedy.confirm(first)
