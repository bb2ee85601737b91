"""What the doctor measures on a torchrun job (torch-free records).

Each rank's child fills one :class:`RankDist` (``doctor/record/distributed.py``,
:class:`~pitstop.doctor.record.distributed.DistRecorder`); the parent merges the ranks into one
:class:`JobRecord` (``doctor/analysis/job.py``) held by ``Observations.distributed``. A rank's own
observations hold a :class:`JobRecord` with that rank alone. The checks of PIT702, PIT703
and PIT704 read the merged record; they run only when it holds two ranks or more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pitstop.ranks import Straggler

__all__ = ["RankDist", "JobRecord"]


@dataclass(frozen=True)
class RankDist:
    """One rank's distributed measurements (per observed optimizer step unless said)."""

    #: ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` of torchrun's environment.
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    #: the script called ``torch.distributed.init_process_group``, and with which backend.
    initialized: bool = False
    backend: str | None = None
    #: seconds the rank waited inside collectives per observed step: DDP's gradient
    #: reduction (from the end of the backward's compute, the last bucket's launch, to the
    #: completion of its all-reduce) plus the explicit collectives (their call's duration).
    waits: tuple[float, ...] = ()
    #: of ``waits``: the part inside DDP's gradient reduction (spent within ``backward``).
    reduction_waits: tuple[float, ...] = ()
    #: gradient all-reduce rounds per observed step: backward passes in which DDP reduced
    #: the gradients (each round all-reduces every bucket once).
    reductions: tuple[int, ...] = ()
    #: bucket all-reduces per observed step (rounds x buckets).
    buckets: tuple[int, ...] = ()
    #: bytes all-reduced per observed step (DDP buckets and explicit ``all_reduce`` calls).
    allreduce_bytes: tuple[int, ...] = ()
    #: backward passes per observed step.
    backwards: tuple[int, ...] = ()
    #: explicit ``torch.distributed`` collective calls in observed steps, by name.
    collective_calls: dict[str, int] = field(default_factory=dict)
    #: cheap fingerprint (crc32 of the first bytes of the first tensor) of the first
    #: training batch each step received from a DataLoader, keyed by step index (warmup
    #: steps included); a step without a DataLoader batch is absent.
    fingerprints: dict[str, str] = field(default_factory=dict)
    #: ``DistributedSampler.epoch`` each time such a sampler started an epoch (``__iter__``).
    sampler_epochs: tuple[int, ...] = ()
    #: how DDP's reduction was measured: ``"pitstop comm hook"`` (an all-reduce hook doing
    #: what DDP's default does, timed), ``"user comm hook (not timed)"``, or ``""`` (no DDP).
    reduction_source: str = ""
    #: DDP's own logging data (``DistributedDataParallel._get_ddp_logging_data()``) read at
    #: the end of the run: bucket sizes, average backward compute/comm times (ns) and the
    #: overlap it measured, as DDP reports them (sampled by DDP, not by pitstop).
    ddp_logging: dict[str, Any] = field(default_factory=dict)
    #: the collective this rank was inside when the run ended (a hang), and for how long.
    waiting_in: str | None = None
    waiting_s: float | None = None

    def mean(self, name: str) -> float:
        """Mean over the observed steps of one per-step tuple field (0 when empty)."""
        xs = getattr(self, name)
        return sum(xs) / len(xs) if xs else 0.0


@dataclass(frozen=True)
class JobRecord:
    """The ranks of one job: ``ranks`` in rank order, and what holds across them."""

    world_size: int = 1
    ranks: tuple[RankDist, ...] = ()
    stragglers: tuple[Straggler, ...] = ()
    #: ranks late in some steps but fewer than a straggler's share (not a finding).
    one_offs: tuple[Straggler, ...] = ()
    #: per-rank mean seconds per step for each phase, with ``collective`` split from the
    #: phase it happened in (DDP's reduction from ``backward``, explicit calls from ``other``).
    breakdowns: tuple[dict[str, float], ...] = ()
    #: per-rank mean seconds per observed step (aligned with ``ranks``).
    step_means: tuple[float, ...] = ()

    @property
    def merged(self) -> bool:
        """Two ranks or more were merged (the distributed checks apply)."""
        return len(self.ranks) >= 2

    @property
    def initialized(self) -> bool:
        """Some rank called ``init_process_group``; otherwise N independent processes."""
        return any(r.initialized for r in self.ranks)
