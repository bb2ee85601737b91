"""The stagewise step of a :class:`pitstop.tune.session.TuneSession` (torch-free): the path of
tricks, each measured on top of the last.

Stage 1 is the fastest kept trick (vs the baseline). Each next stage measures the remaining
candidates *on top of the path so far* (paired against it, loss-checked against the original
baseline) and adds the fastest one that is decided faster; it goes on until a stage adds
nothing or the budget runs out (:mod:`pitstop.tune.stages` holds the stages' record).

The candidates: the best value of each other kept knob and the *promising* ones (no gain alone
but a point estimate above 1, loss-equivalent: effects interact, e.g. on oneDNN channels_last
pays most under bf16), at most ``max_combine``; and the tricks that were not faster alone
(``slower``, ``no_gain``) whose phases the path may have made the bottleneck: a compute trick
cannot show a gain while the step waits for data, and can once DataLoader workers hide the
wait. A candidate that cannot help the new bottleneck is skipped with the reason
(:func:`pitstop.tune.stages.retry_reason`); the survey's phase shares, scaled by the path, order
the others (:func:`pitstop.tune.stages.evidence_order`).

1. **Cheap candidates, in stages**: all of them are measured *together* against the path (one
   :meth:`TuneSession.measure`: the reference runs are shared, ``R C1 C2 R C3 ...``). The fastest
   one decided faster (and loss-equivalent) is added; every other candidate that did not fail,
   was not rejected and does not conflict is measured again on top of the new path.
2. **Expensive candidates** (compilation) last, each knob's values in one comparison against the
   final cheap path: the comparison that matters, and no compile run is spent twice. When one is
   added, the cheap candidates not added (alive: not failed, rejected or conflicting) that are
   still eligible get stages on top of the path with it, as in 1: compilation can move the
   bottleneck (to the input pipeline: workers that showed nothing on the slower compute can pay
   once compiled code computes faster than batches arrive).
3. The path is **re-measured against the untouched baseline in fresh pairs until it decides**
   (:mod:`pitstop.tune.confirm`; a single trick too: the best of several noisy trials is biased
   upward): that speed-up is the one reported; when the path does not hold, its first stage is
   confirmed the same way; when that does not hold either, nothing is recommended.

Knobs whose Recipe fields conflict are skipped. The caller's trials are never changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pitstop.tune.confirm import confirm
from pitstop.tune.result import CombineStep, Trial
from pitstop.tune.schedule.listing import SHARE_SAFETY
from pitstop.tune.schedule.racing import confirm_seconds
from pitstop.tune.session import TuneSession
from pitstop.tune.stages import Stage, evidence_order, retry_reason, shares_after
from pitstop.tune.verdict import verdict

__all__ = ["combine", "best_per_knob"]


def _key(t: Trial) -> tuple[str, str]:
    return (t.settings[0].code, t.settings[0].knob)


def best_per_knob(trials: Sequence[Trial], status: str | tuple[str, ...]) -> list[Trial]:
    """The fastest trial of each knob among single-knob trials with ``status`` (``no_gain``:
    the promising ones only, see the module docs)."""
    statuses = (status,) if isinstance(status, str) else status
    best: dict[tuple[str, str], Trial] = {}
    for t in trials:
        if len(t.settings) != 1 or t.status not in statuses or t.speed is None:
            continue
        if statuses == ("no_gain",) and (t.expensive or t.speed.ratio <= 1.0 or t.loss_check is None
                                         or not t.loss_check.passed):
            continue
        k = _key(t)
        if k not in best or t.speed.ratio > best[k].speed.ratio:
            best[k] = t
    return sorted(best.values(), key=lambda t: -t.speed.ratio)


class _Path:
    """The path so far (``combo``), its stages and the steps that explain it."""

    def __init__(self, session: TuneSession, first: Trial) -> None:
        self.session = session
        self.combo = session.new_trial(first.settings)[0]  # its runs as the reference stay apart from the trial's
        self.steps = [CombineStep(first.name, "added", "fastest kept trick: starts the path", first.speed)]
        ratio = first.speed.ratio if first.speed is not None else None
        self.stages = [Stage(1, first.name, first.settings, first.speed, ratio, f"vs the baseline: {first.reason}")]
        self.stopped = False  # the budget ran out
        self._said: set[tuple[str, str]] = set()
        self.measured: dict[int, Trial] = {}  # id(candidate) -> its last trial on top of the path

    @property
    def cumulative(self) -> float:
        return self.stages[-1].cumulative or 1.0

    def shares(self) -> dict[str, float] | None:
        """The survey's phase shares once the path runs (:func:`pitstop.tune.stages.shares_after`)."""
        s = self.session
        phases = lambda st: s.knob(st).phases(st.value, s.ctx)  # noqa: E731
        touched = None if any(not phases(st) for st in self.combo.settings) else {
            p for st in self.combo.settings for p in phases(st)}
        return shares_after(s.ctx, touched, self.cumulative)

    def eligible(self, cands: Sequence[Trial], sure: set[int]) -> list[Trial]:
        """The candidates worth measuring on top of the path, likely winner first; the others
        are skipped with the reason (said once per candidate and reason)."""
        s = self.session
        phases = lambda st: s.knob(st).phases(st.value, s.ctx)  # noqa: E731
        shares = self.shares()
        out = []
        for c in cands:
            why = None if id(c) in sure else retry_reason(
                phases(c.settings[0]), self.combo.settings, phases, shares, bar=1 + s.options.margin,
                safety=SHARE_SAFETY)
            if why is None:
                out.append(c)
            elif (c.name, why) not in self._said:
                self._said.add((c.name, why))
                self.steps.append(CombineStep(c.name, "skipped", f"not measured on top of {self.combo.name}: {why} "
                                              f"(alone vs the baseline: {c.reason})"))
        return evidence_order(out, lambda c: phases(c.settings[0]), shares)

    def _with(self, cands: Sequence[Trial]) -> list[tuple[Trial, Trial]]:
        """(candidate, path + candidate) for each candidate that does not conflict."""
        out = []
        for cand in cands:
            new, conflict = self.session.new_trial(self.combo.settings + cand.settings)
            if conflict:
                self.steps.append(CombineStep(cand.name, "skipped", f"conflicts with {self.combo.name}: {conflict}"))
            else:
                out.append((cand, new))
        return out

    def stage(self, cands: Sequence[Trial]) -> tuple[Trial | None, list[Trial]]:
        """Measure ``cands`` on top of the path together; add the fastest faster one. Returns
        it (None: nothing added) and the candidates not added that may still pay on a later
        path (measured, neither failed nor rejected nor conflicting)."""
        tried = self._with(cands)
        if not tried:
            return None, []
        self.session.path_shares = self.shares()  # the candidates' priors: their phases' share on the path
        pairs = self.session.measure(self.combo, [new for _, new in tried])
        faster: list[tuple[Trial, Trial]] = []
        again: list[Trial] = []
        for cand, new in tried:
            self.session.judge(new, pairs[id(new)], against=self.combo.name, reference=self.combo)
            self.measured[id(cand)] = new
            if new.status in ("failed", "rejected", "skipped", "not_applicable"):
                self.steps.append(CombineStep(cand.name, "failed" if new.status == "not_applicable" else new.status,
                                              new.reason))
                # the budget ran out (a candidate whose forecast did not fit leaves room for the others)
                self.stopped |= new.status == "skipped" and id(new) not in self.session.not_started
                continue
            status, reason = verdict(new.speed, self.session.options.margin)
            if status == "kept":
                faster.append((cand, new))
            else:
                self.steps.append(CombineStep(cand.name, status, f"not added: vs {self.combo.name}: {reason}",
                                              new.speed))
            again.append(cand)
        if not faster:
            return None, again
        faster.sort(key=lambda cn: -cn[1].speed.ratio)
        cand, new = faster[0]
        _, reason = verdict(new.speed, self.session.options.margin)
        self.steps.append(CombineStep(cand.name, "added", f"vs {self.combo.name}: {reason}", new.speed))
        self.stages.append(Stage(len(self.stages) + 1, cand.name, new.settings, new.speed,
                                 self.cumulative * new.speed.ratio, f"vs {self.combo.name}: {reason}"))
        self.combo = new
        return cand, [c for c in again if c is not cand]

    def confirm(self, first: Trial) -> Trial | None:
        """The result, confirmed in fresh pairs against the baseline (:func:`pitstop.tune.confirm.confirm`):
        the whole path; when it does not hold, its first stage; else None."""
        chosen = [self.combo] if len(self.combo.settings) >= 2 else []
        for trial in chosen + [first]:
            final, step = confirm(self.session, trial)
            self.steps.append(step)
            if final is not None:
                held = len(final.settings)
                self.stages = [replace(s, in_recipe=s.index <= held) for s in self.stages]
                return final
        self.stages = [replace(s, in_recipe=False) for s in self.stages]
        return None


def _cheap_stages(path: _Path, pool: list[Trial], sure: set[int]) -> list[Trial]:
    """Stages of the cheap candidates ``pool`` until one adds nothing or the budget runs out;
    returns the candidates not added that are still alive (not failed, rejected, conflicting)."""
    while pool and not path.stopped:
        live = path.eligible(pool, sure)
        if not live:
            break
        added, again = path.stage(live)
        # the ones not eligible now stay in the pool: a later path may move the bottleneck to them
        measured = {id(c) for c in live}
        pool = again + [c for c in pool if id(c) not in measured]
        if added is None:
            break
    return pool


def combine(session: TuneSession) -> None:
    """Fill ``session.combination``, ``session.stages`` and ``session.best``; the expensive tricks
    deferred to the path (``session.deferred``) get their single trial's record from their
    measurement on top of it."""
    kept = best_per_knob(session.trials, "kept")
    if not kept:
        return
    taken = {_key(t) for t in kept}
    promising = [t for t in best_per_knob(session.trials, "no_gain") if _key(t) not in taken]
    first, path = kept[0], _Path(session, kept[0])
    sure_list = (kept[1:] + promising)[: session.options.max_combine]
    sure = {id(t) for t in sure_list} | {id(t) for t in session.deferred}
    known = taken | {_key(t) for t in promising}
    # tricks not faster alone: the best value of each other knob (every value of an expensive one)
    retry = [t for t in best_per_knob(session.trials, ("slower", "no_gain")) if _key(t) not in known]
    retry += [t for t in session.trials if t.expensive and len(t.settings) == 1 and t.status in ("slower", "no_gain")
              and _key(t) not in known and t not in retry]
    # tricks the survey's bound left unmeasured alone (their phases a small share of the baseline's
    # step): the path may have made those phases the bottleneck (a starved loop's forward and
    # backward once workers feed it); eligible() measures them when their share on the path allows
    for t in session.not_applicable:
        if t.bounded and _key(t) not in known and all(_key(t) != _key(r) for r in retry):
            retry.append(t)
    session.reserve = _confirm_forecast(session, path)  # under a budget: the confirmation stays affordable
    pool = _cheap_stages(path, [c for c in sure_list + retry if not c.expensive], sure)
    expensive = [c for c in sure_list + retry if c.expensive] + list(session.deferred)
    joined = False
    for knob in dict.fromkeys(_key(c) for c in expensive):
        if path.stopped:
            break
        session.reserve = _confirm_forecast(session, path)
        group = path.eligible([c for c in expensive if _key(c) == knob], sure)
        if group:
            joined |= path.stage(group)[0] is not None
    if joined and pool and not path.stopped:
        # compilation can move the bottleneck (to the input pipeline, the optimizer): the cheap
        # tricks not added get stages on top of the path with it (their steps say "vs ... + compile")
        session.reserve = _confirm_forecast(session, path)
        _cheap_stages(path, pool, sure)
    session.reserve = 0.0
    best = path.confirm(first)
    for single in session.deferred:
        _record_on_path(session, single, path)
    session.combination, session.stages, session.best = path.steps, path.stages, best


def _confirm_forecast(session: TuneSession, path: _Path) -> float:
    """Under a budget, the seconds the path's confirmation in fresh pairs is forecast to take
    (``--repeats`` pairs: :func:`pitstop.tune.schedule.racing.confirm_seconds`); 0 without a budget."""
    if session.budget.seconds is None:
        return 0.0
    return confirm_seconds(session.options.min_pairs, session.estimate(path.combo), session.estimate(session.baseline))


def _record_on_path(session: TuneSession, single: Trial, path: _Path) -> None:
    """An expensive trick deferred to the path: its single trial says what it measured on top of
    the path (against it, not against the baseline), or why it was not measured."""
    new = path.measured.get(id(single))
    if new is None or new.speed is None:
        said = [c.reason for c in path.steps if c.added == single.name and c.status in ("skipped", "failed")]
        if new is not None and new.status == "failed":
            single.runs, single.status, single.reason = new.runs, "failed", f"on top of the path: {new.reason}"
            return
        single.status = "skipped"
        single.reason = ("expensive: measured after the cheap tricks are decided, on top of the path; "
                         + (said[-1] if said else "not measured: the time budget ran out before its turn"))
        return
    name = " + ".join(s.label for s in new.settings[:-len(single.settings)]) or "the baseline"
    single.runs, single.speed, single.loss_check = new.runs, new.speed, new.loss_check
    single.compile, single.explanation, single.memory_change = new.compile, new.explanation, new.memory_change
    single.status, single.against, single.to_decide = new.status, name, new.to_decide
    single.reason = f"measured on top of {name} (expensive: after the cheap tricks were decided): {new.reason}"
