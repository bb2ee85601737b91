"""One job's ranks side by side (torch-free): the per-rank model that both ``pitstop trace``
(one trace file per rank) and ``pitstop doctor --nproc-per-node N`` (one instrumented process
per rank) fill, and the straggler model they share.

Every synchronous collective ends on all ranks when the last rank has arrived: a rank that
arrives late waits least inside it, and the others (its *victims*) wait for it. Steps are
matched across ranks by their number where the producer gives one (a trace's
``ProfilerStep#N``, the doctor's step index), else by order. In a step, a rank is *late* when
the median wait of the other ranks exceeds its own by more than a bar; the latest of them is
the step's *culprit* (last to arrive). A rank late in most steps is a *recurring* straggler
(a finding); a rank late in fewer steps is a *one-off* (reported apart, not a finding).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["StepStats", "RankView", "Spread", "Straggler", "LateStep", "StraggleAnalysis", "PHASE_CAUSE",
           "analyze_stragglers", "find_stragglers", "match_steps", "rank_ranges", "spread"]

#: the cause a phase names: what made a rank late (data, host, compute, communication)
PHASE_CAUSE = {"data": "data", "input": "data", "host": "host", "launch": "host", "sync": "host", "other": "host",
               "optimizer": "compute", "forward": "compute", "backward": "compute", "compute": "GPU compute",
               "communication": "communication"}


@dataclass(frozen=True)
class StepStats:
    """Seconds over a rank's observed steps."""

    median: float
    p90: float
    steps: int


@dataclass(frozen=True)
class RankView:
    """What one rank did, in the terms both producers share.

    ``breakdown`` maps a phase name (the producer's: the doctor's phases plus ``"collective"``,
    or a trace's ``"compute"``, ``"communication"``, ``"idle"`` ...) to mean seconds per step.
    ``waits`` holds, per observed step in order, the seconds this rank spent waiting inside
    collectives (or DDP's gradient reduction); empty when the producer could not tell.
    ``wait_keys``, when given, numbers those steps (aligned with ``waits``): the steps of the
    ranks are matched by these numbers instead of by order.
    """

    rank: int
    world_size: int
    step_time: StepStats | None
    breakdown: dict[str, float] = field(default_factory=dict)
    samples_per_s: float | None = None
    device: str = ""
    source: str = ""
    waits: tuple[float, ...] = ()
    wait_keys: tuple[int, ...] = ()


@dataclass(frozen=True)
class Spread:
    """Step-time spread across ranks (medians, seconds): slowest / fastest."""

    fastest_rank: int
    slowest_rank: int
    fastest: float
    slowest: float

    @property
    def ratio(self) -> float:
        return self.slowest / self.fastest if self.fastest > 0 else float("inf")


@dataclass(frozen=True)
class Straggler:
    """A rank the others waited for in ``late_steps`` of ``steps`` matched steps.

    ``phase``: where it spends the most time beyond its peers (the producer's phase name),
    ``cause`` the kind of that phase (:data:`PHASE_CAUSE`: data, host, compute, GPU compute,
    communication; ``unknown``). ``lag``: median seconds the others waited for it in its late
    steps. ``victims``: the ranks that waited for it (never late in those steps), with
    ``victim_waits`` (aligned) the mean seconds each waited for it per step it waited for it and
    ``waited_total`` the seconds all of them waited over the run. ``recurring``: late in at
    least the required share of the steps (a finding), else a one-off. ``culprit_steps``: the
    steps in which it was the last to arrive; ``late_keys`` the numbers of its late steps.
    """

    rank: int
    phase: str
    lag: float
    late_steps: int
    steps: int
    evidence: str
    cause: str = "unknown"
    victims: tuple[int, ...] = ()
    victim_waits: tuple[float, ...] = ()
    waited_total: float = 0.0
    recurring: bool = True
    culprit_steps: int = 0
    late_keys: tuple[int, ...] = ()


@dataclass(frozen=True)
class LateStep:
    """One matched step in which some rank was late: ``key`` its number (or index),
    ``culprit`` the last rank to arrive, ``lag`` how long the median rank waited for it,
    ``late`` every late rank (the culprit first)."""

    key: int
    culprit: int
    lag: float
    late: tuple[int, ...]


@dataclass(frozen=True)
class StraggleAnalysis:
    """The straggler model's answer: ``stragglers`` (recurring), ``one_offs``, the late
    ``steps``, how many steps were matched and how (``"step number"`` / ``"order"``)."""

    stragglers: tuple[Straggler, ...] = ()
    one_offs: tuple[Straggler, ...] = ()
    steps: tuple[LateStep, ...] = ()
    matched: int = 0
    matched_by: str = ""
    bar: float = 0.0


def rank_ranges(ranks: Sequence[int], world: int | None = None) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``; every rank of ``world`` but a few -> ``"all 128 but 3, 7"``."""
    rs = sorted(set(ranks))
    if world and len(rs) > world // 2 and len(rs) < world:
        missing = sorted(set(range(world)) - set(rs))
        if len(missing) <= 8:
            return f"all {world} but {rank_ranges(missing)}"
    if world and len(rs) == world and rs == list(range(world)):
        return f"all {world}"
    parts, start = [], None
    for i, r in enumerate(rs):
        if start is None:
            start = r
        if i + 1 == len(rs) or rs[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts) if parts else "none"


def spread(ranks: list[RankView]) -> Spread | None:
    timed = [r for r in ranks if r.step_time is not None and r.step_time.steps > 0]
    if len(timed) < 2:
        return None
    lo = min(timed, key=lambda r: r.step_time.median)
    hi = max(timed, key=lambda r: r.step_time.median)
    return Spread(lo.rank, hi.rank, lo.step_time.median, hi.step_time.median)


def _slow_phase(rank: RankView, others: list[RankView], skip: frozenset[str]) -> str:
    """The phase in which ``rank`` spends the most seconds more than the others' median."""
    best, best_excess = "unknown", 0.0
    for phase, secs in rank.breakdown.items():
        if phase in skip:
            continue
        peers = [o.breakdown.get(phase, 0.0) for o in others]
        excess = secs - (statistics.median(peers) if peers else 0.0)
        if excess > best_excess:
            best, best_excess = phase, excess
    return best


def match_steps(ranks: list[RankView]) -> tuple[list[tuple[int, list[float]]], str]:
    """The steps every rank observed, as ``(key, waits in the order of ranks)``: by step number
    when every rank numbers its steps, else by order (key = index)."""
    if all(len(r.wait_keys) == len(r.waits) for r in ranks):
        tables = [dict(zip(r.wait_keys, r.waits)) for r in ranks]
        common = set(tables[0]).intersection(*tables[1:])
        if common:
            return [(k, [t[k] for t in tables]) for k in sorted(common)], "step number"
    steps = min(len(r.waits) for r in ranks)
    return [(k, [r.waits[k] for r in ranks]) for k in range(steps)], "order"


def _lags(waits: list[float]) -> list[float]:
    """For each rank: the median wait of the others minus its own (exact, one sort)."""
    n = len(waits)
    order = sorted(range(n), key=waits.__getitem__)
    pos = {i: p for p, i in enumerate(order)}
    s = [waits[i] for i in order]
    m = n - 1  # size without the rank itself

    def nth(j: int, skip: int) -> float:  # j-th of s without index ``skip``
        return s[j] if j < skip else s[j + 1]

    out = []
    for i in range(n):
        p = pos[i]
        med = nth(m // 2, p) if m % 2 else (nth(m // 2 - 1, p) + nth(m // 2, p)) / 2
        out.append(med - waits[i])
    return out


def analyze_stragglers(
    ranks: list[RankView],
    *,
    min_lag: float,
    rel_lag: float = 0.05,
    min_fraction: float = 0.6,
    wait_phases: frozenset[str] = frozenset({"collective", "communication", "idle"}),
) -> StraggleAnalysis:
    """Late ranks step by step, culprits, victims, recurring stragglers and one-offs.

    The bar is ``max(min_lag, rel_lag * median step time)``. A rank late in at least
    ``min_fraction`` of the matched steps is a recurring straggler, named with the phase
    (outside ``wait_phases``) where it spends the most time beyond its peers. A job with fewer
    than two ranks with waits or two matched steps has none.
    """
    waited = [r for r in ranks if r.waits]
    if len(waited) < 2:
        return StraggleAnalysis()
    matched, how = match_steps(waited)
    if len(matched) < 2:
        return StraggleAnalysis(matched=len(matched), matched_by=how)
    medians = [r.step_time.median for r in waited if r.step_time is not None]
    bar = max(min_lag, rel_lag * (statistics.median(medians) if medians else 0.0))
    late_lags: dict[int, list[float]] = {}
    late_keys: dict[int, list[int]] = {}
    culprit_of: dict[int, int] = {}
    victim_sum: dict[int, list[float]] = {}
    victim_n: dict[int, list[int]] = {}
    steps = []
    for key, waits in matched:
        lags = _lags(waits)
        late = sorted((i for i, lag in enumerate(lags) if lag > bar), key=lambda i: waits[i])
        if not late:
            continue
        lateset = set(late)
        for i in late:
            late_lags.setdefault(i, []).append(lags[i])
            late_keys.setdefault(i, []).append(key)
            acc = victim_sum.setdefault(i, [0.0] * len(waited))
            cnt = victim_n.setdefault(i, [0] * len(waited))
            for v, w in enumerate(waits):
                if v not in lateset:
                    acc[v] += max(0.0, w - waits[i])
                    cnt[v] += 1
        culprit_of[late[0]] = culprit_of.get(late[0], 0) + 1
        steps.append(LateStep(key=key, culprit=waited[late[0]].rank, lag=lags[late[0]],
                              late=tuple(waited[i].rank for i in late)))
    recurring, one_offs = [], []
    for i in sorted(late_lags, key=lambda i: waited[i].rank):
        rank = waited[i]
        n_late = len(late_lags[i])
        peers = [r for r in waited if r is not rank]
        phase = _slow_phase(rank, peers, wait_phases)
        lag = statistics.median(late_lags[i])
        victims = [(waited[v].rank, s / victim_n[i][v]) for v, s in enumerate(victim_sum[i]) if s > 0]
        total = sum(victim_sum[i])
        is_recurring = n_late >= min_fraction * len(matched)
        kind = "steadily" if is_recurring else "once" if n_late == 1 else "now and then"
        evidence = (f"the other ranks waited {lag * 1e3:.1f} ms (median) for rank {rank.rank} inside collectives "
                    f"in {n_late} of {len(matched)} steps ({kind}; last to arrive in {culprit_of.get(i, 0)}); "
                    f"its {phase} phase is the longest beyond its peers")
        s = Straggler(rank=rank.rank, phase=phase, lag=lag, late_steps=n_late, steps=len(matched),
                      evidence=evidence, cause=PHASE_CAUSE.get(phase, "unknown"),
                      victims=tuple(v for v, _ in victims), victim_waits=tuple(w for _, w in victims),
                      waited_total=total, recurring=is_recurring, culprit_steps=culprit_of.get(i, 0),
                      late_keys=tuple(late_keys[i]))
        (recurring if is_recurring else one_offs).append(s)
    return StraggleAnalysis(stragglers=tuple(recurring), one_offs=tuple(one_offs), steps=tuple(steps),
                            matched=len(matched), matched_by=how, bar=bar)


def find_stragglers(ranks: list[RankView], *, min_lag: float, rel_lag: float = 0.05, min_fraction: float = 0.6,
                    wait_phases: frozenset[str] = frozenset({"collective", "communication", "idle"}),
                    ) -> list[Straggler]:
    """The recurring stragglers of :func:`analyze_stragglers` (ranks the others steadily wait for)."""
    return list(analyze_stragglers(ranks, min_lag=min_lag, rel_lag=rel_lag, min_fraction=min_fraction,
                                   wait_phases=wait_phases).stragglers)
