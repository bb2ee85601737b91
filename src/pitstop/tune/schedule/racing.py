"""The racing scheduler of a paired comparison (torch-free): which candidate the next run goes
to, and how many pairs (and seconds) a verdict is still away.

A comparison (:meth:`pitstop.tune.session.TuneSession.measure`) runs the reference and the
candidates as ``R C C R C C R ...``: the first candidate run after a reference run pairs with it,
the second with the reference run after it. *Which* candidate fills each slot is decided run by
run, by expected gain per second of measuring (:func:`rank`):

- a candidate's **expected speed-up** is its pairs' point estimate once it has one, before that
  its :class:`Prior` (the bench's measured ratio on this device when one was given, else what
  halving the step phases it can change would give, from the survey's shares);
- its **seconds to a verdict**: the pairs it still needs (:func:`pairs_to_verdict`, forecast from
  the spread of its pairs, or of all pairs so far, against its distance to the bar), each costing
  a candidate run and half a reference run, plus a one-time cost (a compile trial's first
  compilation) not paid yet;
- the score is ``(expected - 1) / seconds``; a candidate not expected to pass the bar scores a
  small floor, so it is measured after every promising one.

So a leader (a large gain measured) is driven to its verdict before a long shot gets its second
pair, and a candidate whose pairs sit at the bar waits. A candidate leaves the race once its
interval decides (:func:`pitstop.paired.decide`: the ``same`` and ``close`` verdicts stop a trick
whose interval can no longer reach the margin), or it fails, or its pairs run out.

:func:`pairs_to_verdict` also says what an undecided trick would have cost to decide
(:func:`more_for_verdict`), for the "not decided: budget" end state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pitstop.paired import Pair, choose_measure
from pitstop.stats import t_quantile

__all__ = ["Prior", "Prospect", "prior_of", "prior_for", "log_ratios", "pooled_noise", "pairs_to_verdict", "rank", "NOISE_PRIOR",
           "FLOOR", "HALVING", "more_for_verdict", "UNKNOWN_SHARE", "confirm_seconds", "CONFIRM_MARGIN"]

#: spread (sd of a pair's log-ratio) assumed before two pairs measured it: 5%
NOISE_PRIOR = 0.05
#: score of a candidate not expected to pass the bar (measured after every promising one)
FLOOR = 1e-3
#: the prior's assumption: a trick halves the time of the step phases it can change
HALVING = 0.5
#: the share of the step assumed for a trick that may change any phase, or without a survey
UNKNOWN_SHARE = 0.5
#: the result's confirmation is planned with this margin on its forecast (runs vary with the load)
CONFIRM_MARGIN = 1.25


@dataclass(frozen=True)
class Prior:
    """What a candidate is expected to give before any pair: ``ratio`` (baseline / candidate)
    and where it comes from (said in the budget plan; it orders the measuring, never a verdict)."""

    ratio: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "source": self.source}


def prior_of(share: float | None, bench: float | None = None, *, phases: Sequence[str] = ()) -> Prior:
    """The prior of a trick whose phases took ``share`` of the step in the survey (None: not
    surveyed, or the trick may change any phase), with the bench's measured whole-step ratio on
    this device when known (Amdahl-scaled to ``share`` when the share is known)."""
    what = " + ".join(phases) if phases else "the step"
    if bench is not None and bench > 0:
        if share is None:
            return Prior(bench, f"pitstop bench measured {bench:.2f}x on this device")
        return Prior(1 / (1 - share + share / bench), f"pitstop bench measured {bench:.2f}x on this device, on {what} "
                                                        f"({share:.0%} of the step in the survey)")
    if share is None:
        s = UNKNOWN_SHARE
        return Prior(1 / (1 - HALVING * s), f"unknown share of the step: as if it halved {s:.0%} of it")
    return Prior(1 / max(1e-9, 1 - HALVING * min(share, 0.999)),
                 f"if it halved {what} ({share:.0%} of the step in the survey)")


def prior_for(knob: Any, value: Any, ctx: Any, bench: Sequence[Any] = (), path_shares: dict[str, float] | None = None
              ) -> Prior:
    """The prior of ``knob`` set to ``value`` on the training of ``ctx`` (a
    :class:`pitstop.tune.knob.Context`): the phases it can change, their share of the step in
    the survey (``path_shares``: the shares once the path it is added to runs), and the ratio
    ``pitstop bench`` measured for its tip on this kind of device when ``bench`` (the
    :class:`pitstop.tune.options.BenchPrior` given) has one."""
    phases = knob.phases(value, ctx) if ctx is not None else ()
    share = ctx.share(phases) if phases and ctx is not None else None
    if phases and path_shares is not None:
        share = sum(path_shares.get(p, 0.0) for p in phases)
    device = ctx.device if ctx is not None else None
    ratio = next((b.ratio for b in bench if b.code == knob.tip and b.device == device), None)
    return prior_of(share, ratio, phases=phases)


def log_ratios(pairs: Sequence[Pair]) -> list[float]:
    """The pairs' log-ratios on the clock they would be decided on."""
    if not pairs:
        return []
    measure = choose_measure(pairs)
    return [math.log(r) for p in pairs if (r := p.ratio(measure.name)) is not None and r > 0]


def _sd(xs: Sequence[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def pooled_noise(groups: Sequence[Sequence[float]], default: float = NOISE_PRIOR) -> float:
    """The spread of one pair's log-ratio pooled over candidates with two pairs or more (each
    around its own mean); ``default`` when none has."""
    num = den = 0.0
    for xs in groups:
        s = _sd(xs)
        if s is not None:
            num += s * s * (len(xs) - 1)
            den += len(xs) - 1
    return math.sqrt(num / den) if den else default


def _spread(logs: Sequence[float], noise: float) -> float:
    """A candidate's own spread, shrunk towards the pooled ``noise`` (one pseudo-pair of it), so
    that two pairs that happen to agree do not forecast a verdict in no time."""
    s = _sd(logs)
    if s is None:
        return noise
    k = len(logs) - 1
    return math.sqrt((k * s * s + noise * noise) / (k + 1))


def pairs_to_verdict(logs: Sequence[float], *, prior: float, bar: float, confidence: float, min_pairs: int, cap: int,
                     noise: float) -> int | None:
    """Pairs, in all, at which the interval of a candidate is forecast to lie wholly on one side
    of ``bar`` (its mean so far, or ``prior`` before any pair, taken as the truth); None when not
    within ``cap`` pairs."""
    m = sum(logs) / len(logs) if logs else math.log(max(prior, 1e-9))
    gap = abs(m - math.log(bar))
    s = _spread(logs, noise)
    q = 1 - (1 - confidence) / 2
    for n in range(max(2, min_pairs, len(logs) + 1), cap + 1):
        if gap > 0 and t_quantile(q, n - 1) * s / math.sqrt(n) < gap:
            return n
    return None


@dataclass(frozen=True)
class Prospect:
    """Where one candidate of a race stands: its ``expected`` speed-up (measured point estimate,
    or prior), pairs measured, ``more`` pairs forecast to its verdict (its remaining cap when
    none is forecast), the ``seconds`` they cost (a one-time cost not yet paid included) and its
    ``score`` (expected gain per second)."""

    expected: float
    pairs: int
    more: int
    seconds: float
    score: float


def rank(cands: Sequence[Any], *, logs: Callable[[Any], list[float]], prior: Callable[[Any], float],
         pair_cost: Callable[[Any], float], one_time: Callable[[Any], float], cap: Callable[[Any], int], bar: float,
         confidence: float, min_pairs: int) -> list[tuple[Any, Prospect]]:
    """``cands`` with their prospects, best score first (ties: the order given)."""
    noise = pooled_noise([logs(c) for c in cands])
    out = []
    for i, c in enumerate(cands):
        xs = logs(c)
        expected = math.exp(sum(xs) / len(xs)) if xs else prior(c)
        total = pairs_to_verdict(xs, prior=prior(c), bar=bar, confidence=confidence, min_pairs=min_pairs, cap=cap(c),
                                 noise=noise)
        more = max(1, (total if total is not None else cap(c)) - len(xs))
        seconds = more * pair_cost(c) + one_time(c)
        gain = expected - 1 if expected > bar else FLOOR * expected
        out.append((i, c, Prospect(expected, len(xs), more, seconds, gain / max(seconds, 1e-9))))
    out.sort(key=lambda icp: (-icp[2].score, icp[0]))
    return [(c, p) for _, c, p in out]


def more_for_verdict(logs: Sequence[float], *, noise: float, bar: float, confidence: float, min_pairs: int,
                     limit: int = 64) -> int | None:
    """More pairs an undecided candidate would need for its interval to clear the bar on one
    side, extrapolated from its pairs' spread (pooled ``noise`` when it has one pair); None when
    its mean sits on the bar (no number of pairs within ``limit`` would decide it)."""
    if not logs:
        return None
    total = pairs_to_verdict(logs, prior=1.0, bar=bar, confidence=confidence, min_pairs=min_pairs, cap=limit,
                             noise=noise)
    return None if total is None else max(1, total - len(logs))


def confirm_seconds(pairs: int, cand_s: float, ref_s: float) -> float:
    """Seconds ``pairs`` fresh pairs of the result against the baseline are forecast to take:
    as many result runs and ``(pairs + 2) // 2`` baseline runs (``R C C R C``), times
    :data:`CONFIRM_MARGIN`."""
    return CONFIRM_MARGIN * (pairs * cand_s + (pairs + 2) // 2 * ref_s)
