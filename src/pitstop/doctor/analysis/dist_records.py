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

__all__ = ["RankDist", "JobRecord", "ShardUnit", "ShardRecord"]


@dataclass(frozen=True)
class ShardUnit:
    """One FSDP unit (an ``fully_shard``-ed module, or an FSDP1 ``FullyShardedDataParallel``)."""

    #: qualified name in the model (``""``: the root; FSDP1's wrapper names left out).
    name: str
    #: elements of the parameters this unit manages (its own, not its sub-units').
    numel: int = 0
    #: bytes of those parameters whole (stored dtype) and of this rank's shard of them.
    full_bytes: int = 0
    local_bytes: int = 0
    #: frees its gathered parameters after forward (gathered again for backward).
    reshard_after_forward: bool = True
    #: FSDP2 explicit prefetch: the units this one issues the all-gather of, ahead.
    forward_prefetch: tuple[str, ...] = ()
    backward_prefetch: tuple[str, ...] = ()
    #: per observed step (means): seconds the rank spent inside this unit's all-gathers and
    #: reduce-scatters (blocking calls: the compute waited for all of it), and all-gathers.
    all_gather_s: float = 0.0
    reduce_scatter_s: float = 0.0
    all_gathers: float = 0.0


@dataclass(frozen=True)
class ShardRecord:
    """A sharded (FSDP) model on one rank: how it is wrapped and what its collectives cost.

    Per-step tuples are per observed optimizer step. Times are seconds inside the
    collective calls FSDP made (``torch.distributed`` wrapped, the caller inside
    ``torch.distributed.fsdp``); a blocking call's time is time the compute waited for
    (exposed). Calls launched with ``async_op=True`` (CUDA streams) return at once: they are
    counted in ``async_calls`` and their overlap is read from a trace (``pitstop trace``).
    """

    #: ``"fsdp2"`` (``fully_shard``) or ``"fsdp1"`` (``FullyShardedDataParallel``).
    framework: str = ""
    world_size: int = 1
    #: the units, root first then in registration order.
    units: tuple[ShardUnit, ...] = ()
    #: blocks a per-block wrapping would use (the children of the largest ``ModuleList``).
    blocks: tuple[str, ...] = ()
    #: stored parameter dtype, the all-gather dtype (MixedPrecisionPolicy ``param_dtype`` /
    #: MixedPrecision ``param_dtype``; the stored dtype when None) and the reduce dtype.
    stored_dtype: str = ""
    param_dtype: str | None = None
    reduce_dtype: str | None = None
    #: FSDP1 ``sharding_strategy`` name (``FULL_SHARD``, ``SHARD_GRAD_OP`` ...); FSDP2:
    #: ``FULL_SHARD`` (whether each unit reshards after forward is per unit).
    sharding: str = ""
    #: FSDP1 ``backward_prefetch`` (``BACKWARD_PRE`` ...) / ``forward_prefetch``.
    backward_prefetch: str | None = None
    forward_prefetch: bool = False
    all_gather_s: tuple[float, ...] = ()
    reduce_scatter_s: tuple[float, ...] = ()
    all_gather_bytes: tuple[int, ...] = ()
    reduce_scatter_bytes: tuple[int, ...] = ()
    all_gathers: tuple[int, ...] = ()
    reduce_scatters: tuple[int, ...] = ()
    #: of the collective seconds: spent in forward, and in backward (per step).
    forward_wait: tuple[float, ...] = ()
    backward_wait: tuple[float, ...] = ()
    async_calls: int = 0
    #: this rank's bytes: parameter shards, gradient shards, whole parameters when gathered
    #: (the sum over units), parameters outside every unit (replicated).
    local_param_bytes: int = 0
    full_param_bytes: int = 0
    replicated_param_bytes: int = 0

    def mean(self, name: str) -> float:
        xs = getattr(self, name)
        return sum(xs) / len(xs) if xs else 0.0

    @property
    def exposed(self) -> tuple[float, ...]:
        """Seconds per step the rank waited inside FSDP's collectives."""
        return tuple(a + b for a, b in zip(self.all_gather_s, self.reduce_scatter_s))

    @property
    def root_only(self) -> bool:
        """One unit holds (nearly) every parameter while the model has blocks to wrap."""
        total = sum(u.numel for u in self.units)
        big = max((u.numel for u in self.units), default=0)
        return bool(total) and len(self.blocks) >= 2 and big >= 0.9 * total


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
    #: completion of its all-reduce) plus the explicit collectives (their call's duration),
    #: FSDP's all-gathers and reduce-scatters included (``shard`` splits them out).
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
    #: a sharded model (FSDP2 / FSDP1): its units, settings and collectives; None for DDP or none.
    shard: ShardRecord | None = None
    #: DDP: parameter bytes of each block a per-block FSDP wrapping would make a unit (the
    #: children of the model's largest ``ModuleList``), in order; () when none was found.
    block_bytes: tuple[int, ...] = ()

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
