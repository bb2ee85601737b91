"""The chosen recipe, confirmed in fresh pairs after the choice (torch-free).

Why: the combination step keeps the trick (or the combination) with the best speed-up of
several noisy trials. A maximum over noisy estimates is biased upward (the winner's curse):
a trick kept at 1.16x may give the user 1.01x. So the number in the recipe and the snippet
never comes from the pairs that chose it: :func:`confirm` measures the chosen configuration
against the baseline again, in new pairs, until they decide, and the claim is theirs.

A claim decided on CPU time (the machine was contended, :func:`pitstop.paired.choose_measure`)
is checked on wall time, the clock the user waits on, over the same fresh pairs: when wall
time's point estimate does not reach the bar (``1 + margin``), it is not recommended;
otherwise the claim is the lower of the two clocks' estimates, labelled (wall time is noisy
under load: its interval may be wide, and it is the one reported when it is the lower).

Wall time under load is noise first: each run's wall time is its CPU time divided by the share
of a core it got, and that share moves as other processes start and stop. In one whole-suite
CI run (the machine busy with the suite's other workers and a spinning process) a planted 1.9x
CPU-time speed-up was kept and then not recommended after its three fresh pairs; the log did
not say why, and three noisy wall-time pairs averaging under the bar is the likely path
(inferred: beside 3 spinning processes here, CPU time read a stable 1.92-1.93x). So while the CPU-time verdict is decided but wall time is neither decided nor at
the bar, the confirmation measures more fresh pairs, up to ``--max-pairs``
(:func:`wall_undecided`); the rule above then reads the wall-time estimate of them all.
"""

from __future__ import annotations

from typing import Any

from pitstop.paired import Measure, decide
from pitstop.tune.result import CombineStep, Trial

__all__ = ["confirm", "wall_claim", "wall_undecided"]


def wall_undecided(pairs: list, *, margin: float, confidence: float, min_pairs: int, seed: int) -> bool:
    """True while ``pairs`` decide a speed-up on CPU time (a contended machine) and wall time
    neither decided (its interval straddles the bar) nor reached ``1 + margin``: more fresh
    pairs can still change the confirmation's verdict."""
    kw = dict(margin=margin, confidence=confidence, min_pairs=min_pairs, seed=seed)
    speed = decide(pairs, **kw)
    if speed is None or speed.status != "faster" or speed.measure.name != "cpu":
        return False
    wall = decide(pairs, **kw, measure=Measure("wall", "wall time", speed.measure.contention, speed.measure.asleep))
    return wall is not None and wall.status == "undecided" and wall.ratio < 1 + margin


def wall_claim(pairs: list, speed: Any, *, margin: float, confidence: float, min_pairs: int,
               seed: int) -> tuple[Any, str | None]:
    """For ``speed`` decided on CPU time under contention: ``(claim, None)``, the claim on
    the lower of CPU time and wall time over ``pairs`` (labelled in its ``measure.why``), or
    ``(None, why)`` when wall time's point estimate does not reach ``1 + margin``."""
    cpu = (f"CPU time measured {speed.ratio:.2f}x [{speed.low:.2f}, {speed.high:.2f}] while the machine was busy "
           f"(threads waited {speed.measure.contention or 0:.0%} of their CPU time for a core)")
    wall = decide(pairs, margin=margin, confidence=confidence, min_pairs=min_pairs, seed=seed,
                  measure=Measure("wall", f"wall time, capped: {cpu}; wall time, the clock you wait on, is the claim",
                                  speed.measure.contention, speed.measure.asleep))
    if wall is None or wall.ratio < 1 + margin or wall.status == "slower":
        got = f"{wall.ratio:.2f}x [{wall.low:.2f}, {wall.high:.2f}]" if wall is not None else "nothing"
        return None, (f"{cpu}, but wall time measured {got}, under the {1 + margin:.2f}x bar: a speed-up on CPU "
                      "time only is not recommended")
    if wall.ratio < speed.ratio:
        return wall, None
    agreed = Measure("cpu", f"{speed.measure.why}; wall time agrees ({wall.ratio:.2f}x [{wall.low:.2f}, "
                            f"{wall.high:.2f}])", speed.measure.contention, speed.measure.asleep)
    return decide(pairs, margin=margin, confidence=confidence, min_pairs=min_pairs, seed=seed, measure=agreed), None


def confirm(session: Any, chosen: Trial) -> tuple[Trial | None, CombineStep]:
    """``chosen`` (a trial or a combination) re-measured against the baseline in fresh pairs:
    ``(trial, step)`` with the trial carrying the fresh claim, or ``(None, step)`` when the
    fresh pairs do not confirm it. When the budget cannot pay for the fresh pairs, ``chosen``
    stays, and the step says its claim is the selection's (biased upward)."""
    opts = session.options
    final, _ = session.new_trial(chosen.settings)
    kw = dict(margin=opts.margin, confidence=opts.confidence, min_pairs=opts.min_pairs, seed=opts.seed)
    pairs = session.measure(session.baseline, [final], planned=False,
                            until=lambda ps: not wall_undecided(ps, **kw))[id(final)]
    session.judge(final, pairs)
    n = len(pairs)
    cut = session.budget.exhausted and final.status != "kept" and (final.speed is None
                                                                   or final.speed.status == "undecided")
    if final.status == "skipped" or cut:
        return chosen, CombineStep(chosen.name, "unconfirmed", f"the time budget ran out before fresh pairs could "
                                   f"confirm it ({n} measured): its speed-up is the one it was chosen with, biased "
                                   "upward (the best of several noisy trials)", chosen.speed)
    if final.status != "kept":
        return None, CombineStep(final.name, "not_confirmed", f"re-measured against the baseline in {n} fresh pairs "
                                 f"after it was chosen: {final.reason}", final.speed)
    if final.speed.measure.name == "cpu":
        claim, why = wall_claim(pairs, final.speed, margin=opts.margin, confidence=opts.confidence,
                                min_pairs=opts.min_pairs, seed=opts.seed)
        if claim is None:
            return None, CombineStep(final.name, "not_confirmed", f"re-measured in {n} fresh pairs: {why}",
                                     final.speed)
        if claim.measure.name == "wall":
            final.reason = f"kept, claim capped at wall time: {claim.measure.why.split(': ', 1)[1]}"
        final.speed = claim
    return final, CombineStep(final.name, "confirmed", f"re-measured against the baseline in {n} fresh pairs after "
                              f"it was chosen (the claim is theirs, not the choosing pairs'): {final.reason}",
                              final.speed)
