"""One job's ranks side by side (torch-free): the per-rank model that both ``pitstop trace``
(one trace file per rank) and ``pitstop doctor --nproc-per-node N`` (one instrumented process
per rank) fill, and the straggler rule they share.

A *straggler* is a rank the others wait for, steadily: in most observed steps it is the one
that waited least inside the collectives while the others waited for it. A rank that is late
once is noise, not a straggler.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

__all__ = ["StepStats", "RankView", "Spread", "Straggler", "find_stragglers", "spread"]


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
    """

    rank: int
    world_size: int
    step_time: StepStats | None
    breakdown: dict[str, float] = field(default_factory=dict)
    samples_per_s: float | None = None
    device: str = ""
    source: str = ""
    waits: tuple[float, ...] = ()


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
    """A rank the others waited for in ``late_steps`` of ``steps`` observed steps."""

    rank: int
    phase: str
    lag: float
    late_steps: int
    steps: int
    evidence: str


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


def find_stragglers(
    ranks: list[RankView],
    *,
    min_lag: float,
    rel_lag: float = 0.05,
    min_fraction: float = 0.6,
    wait_phases: frozenset[str] = frozenset({"collective", "communication", "idle"}),
) -> list[Straggler]:
    """Ranks the others steadily wait for.

    In step ``k`` the rank with the smallest wait is *late* when the median wait of the other
    ranks exceeds its own by more than ``max(min_lag, rel_lag * median step time)``. A rank late
    in at least ``min_fraction`` of the steps that every rank observed is a straggler, named
    with the phase (outside ``wait_phases``) where it spends the most time beyond its peers.
    A balanced job, or one with fewer than two ranks or two common steps, has none.
    """
    waited = [r for r in ranks if r.waits]
    if len(waited) < 2:
        return []
    steps = min(len(r.waits) for r in waited)
    if steps < 2:
        return []
    medians = [r.step_time.median for r in waited if r.step_time is not None]
    bar = max(min_lag, rel_lag * (statistics.median(medians) if medians else 0.0))
    late: dict[int, list[float]] = {}
    for k in range(steps):
        first = min(waited, key=lambda r: r.waits[k])
        others = [r.waits[k] for r in waited if r is not first]
        lag = statistics.median(others) - first.waits[k]
        if lag > bar:
            late.setdefault(first.rank, []).append(lag)
    out = []
    for rank_no, lags in sorted(late.items()):
        if len(lags) < min_fraction * steps:
            continue
        rank = next(r for r in waited if r.rank == rank_no)
        peers = [r for r in waited if r is not rank]
        phase = _slow_phase(rank, peers, wait_phases)
        lag = statistics.median(lags)
        out.append(Straggler(
            rank=rank_no, phase=phase, lag=lag, late_steps=len(lags), steps=steps,
            evidence=(f"the other ranks waited {lag * 1e3:.1f} ms (median) for rank {rank_no} inside "
                      f"collectives in {len(lags)} of {steps} steps; its {phase} phase is the longest "
                      "beyond its peers"),
        ))
    return out
