"""What one data-parallel rank holds of the training state, replicated (DDP) or sharded (FSDP2),
and what sharding moves per step (torch-free arithmetic, PIT706; shared with OOM diagnosis).

Under DDP every rank holds the whole parameters, gradients and optimizer state. FSDP2
(``fully_shard``, full sharding) splits each parameter along dim 0 into one shard per rank, and
the gradients and the optimizer state follow the parameters: each rank holds about 1/N of each.
While a unit computes, its parameters are gathered whole (in the all-gather dtype) and freed
again, so the peak also holds the largest unit gathered (two with prefetch).

Per step each rank receives the other ranks' shards of every unit it gathers (forward, and
again in backward for the units resharded after forward) and reduce-scatters every gradient:
``(N-1)/N`` of the bytes each time (ring collectives). DDP all-reduces every gradient:
``2(N-1)/N`` of the gradient bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StateBytes", "CommBytes", "per_rank_bytes", "comm_bytes_per_step", "shard_of"]


def shard_of(nbytes: int, world_size: int) -> int:
    """Bytes of one rank's shard of ``nbytes`` (rounded up, as FSDP pads dim 0)."""
    return -(-int(nbytes) // max(1, int(world_size)))


@dataclass(frozen=True)
class StateBytes:
    """What one rank holds under ``strategy`` (``"ddp"`` or ``"fsdp2"``) with ``world_size``
    ranks: ``params``, ``grads``, ``optimizer_state`` between steps, and ``gathered``: the
    largest unit's parameters gathered whole while it computes (FSDP2 only; 0 when unknown)."""

    strategy: str
    world_size: int
    params: int
    grads: int
    optimizer_state: int
    gathered: int = 0

    @property
    def state(self) -> int:
        """Parameters + gradients + optimizer state held between steps."""
        return self.params + self.grads + self.optimizer_state

    @property
    def peak(self) -> int:
        """:attr:`state` plus the gathered unit (before activations)."""
        return self.state + self.gathered


@dataclass(frozen=True)
class CommBytes:
    """Bytes each rank moves per optimizer step (received for an all-gather, sent for a
    reduce-scatter, both for an all-reduce)."""

    all_gather: int
    reduce_scatter: int
    all_reduce: int

    @property
    def total(self) -> int:
        return self.all_gather + self.reduce_scatter + self.all_reduce


def per_rank_bytes(params: int, grads: int, optimizer_state: int, world_size: int, *, strategy: str = "fsdp2",
                   largest_unit: int = 0, gather_ratio: float = 1.0, prefetch: bool = False) -> StateBytes:
    """What each of ``world_size`` ranks holds of a model whose whole parameters, gradients and
    optimizer state take ``params``, ``grads``, ``optimizer_state`` bytes (as DDP holds them on
    every rank). ``largest_unit``: bytes of the largest unit's parameters (FSDP2's transient
    all-gather buffer), times ``gather_ratio`` (0.5: gathered in bf16 from fp32), twice with
    ``prefetch``. ``strategy="ddp"`` returns the replicated sizes."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if strategy == "ddp":
        return StateBytes("ddp", world_size, int(params), int(grads), int(optimizer_state))
    if strategy != "fsdp2":
        raise ValueError(f"strategy must be 'ddp' or 'fsdp2', got {strategy!r}")
    gathered = int(largest_unit * gather_ratio) * (2 if prefetch else 1) if world_size > 1 else 0
    return StateBytes("fsdp2", world_size, shard_of(params, world_size), shard_of(grads, world_size),
                      shard_of(optimizer_state, world_size), gathered)


def comm_bytes_per_step(params: int, grads: int, world_size: int, *, strategy: str = "fsdp2",
                        regathered: int | None = None, gather_ratio: float = 1.0, reduce_ratio: float = 1.0,
                        reductions: int = 1) -> CommBytes:
    """Bytes each rank moves per optimizer step. FSDP2: every parameter gathered in forward,
    ``regathered`` bytes of them again in backward (default: all; the units resharded after
    forward), in the all-gather dtype (``gather_ratio``); every gradient reduce-scattered
    (``reduce_ratio`` for the reduce dtype) ``reductions`` times (1 with
    ``set_requires_gradient_sync(False)`` on the other micro-batches). DDP: every gradient
    all-reduced ``reductions`` times."""
    if world_size <= 1:
        return CommBytes(0, 0, 0)
    part = (world_size - 1) / world_size
    if strategy == "ddp":
        return CommBytes(0, 0, int(2 * part * grads * reductions))
    again = params if regathered is None else regathered
    return CommBytes(int(part * (params + again) * gather_ratio), int(part * grads * reduce_ratio * reductions), 0)
