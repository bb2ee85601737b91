"""PIT706 shard-state: every data-parallel rank holds a full replica of the training state."""

from __future__ import annotations

from pitstop.catalog import Tip


class ShardStateTip(Tip):
    code = "PIT706"
    slug = "shard-state"
    title = "Every data-parallel rank holds the whole model, its gradients and optimizer state: shard them"
    faces = "DKE"
    seeds = ()
    truth = ("memory per rank before and after, measured; the step may get slower (all-gathers): the doctor "
             "and tune say by how much, and the engine applies it with a sharded checkpoint that resumes exactly")

    what = """
        Under DistributedDataParallel each rank keeps a full copy of the parameters, their
        gradients and the optimizer state (Adam: two more tensors per parameter). When that
        replicated state is a large share of the device's memory, or the job runs out of
        memory, sharding it over the ranks frees most of it: FSDP2 (`fully_shard`) divides
        parameters, gradients and optimizer state by the world size and gathers each block's
        parameters only while it computes. The doctor says what each rank holds today, what it
        would hold sharded (from the model's real sizes and the world size) and what the
        all-gathers would move per step.
    """
    why = """
        For a model of P parameters trained in fp32 with Adam, DDP keeps 16 bytes per parameter
        on every rank (4 weight, 4 gradient, 8 optimizer state) before any activation. That
        fixed state does not shrink with more ranks, so it caps the batch and the model size
        each rank can hold; sharded, each rank keeps 16P/N plus the largest unit's gathered
        parameters, and the memory freed goes to activations (a larger batch) or a larger model.
    """
    example = """
        ```python
        model = DDP(build_model().cuda(), device_ids=[local_rank])
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)   # full state on every rank
        ```
    """
    use_instead = """
        ```python
        from torch.distributed.fsdp import fully_shard
        model = build_model().cuda()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)   # state of this rank's shard only
        ```
        With pitstop's engine: `Recipe(strategy="fsdp2")`, which also saves a sharded checkpoint
        (`torch.distributed.checkpoint`) that resumes on another world size. When only the
        optimizer state is the problem, `torch.distributed.optim.ZeroRedundancyOptimizer`
        shards that alone and keeps DDP.
    """
    when_not = """
        When the replicated state is a small share of memory (activations dominate), sharding
        saves little and adds all-gathers and reduce-scatters to every step: activation
        checkpointing (PIT401) or bf16 (PIT301) cut the larger part. On one rank there is
        nothing to shard over.
    """
    references = (
        "PyTorch docs, torch.distributed.fsdp.fully_shard (FSDP2): https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html",
        "PyTorch docs, ZeroRedundancyOptimizer: https://pytorch.org/docs/stable/distributed.optim.html",
        "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models (SC 2020): https://arxiv.org/abs/1910.02054",
        "Beyond the seeds; related: PIT705 (fsdp-overlap), PIT402 (optimizer state), PIT401 (activation checkpointing)",
    )


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402
from pitstop.units import mib  # noqa: E402


def sharded_bytes(replicated: int, world_size: int) -> int:
    """Bytes of parameters + gradients + optimizer state one rank keeps under FSDP2 (each rank a
    1/world_size shard) when DDP keeps ``replicated`` on every rank. (The all-gathered unit's
    parameters come on top while it computes; issue 43 measures the whole per-rank figure.)"""
    return -(-replicated // max(1, world_size))


class ShardFix(MemoryFix, tip="PIT706"):
    """Sharding parameters, gradients and optimizer state over the job's ranks (FSDP2):
    computed from the bytes each rank held at the peak and the world size."""

    title = "shard the training state over the ranks"

    def estimate(self, basis, obs, *, limit, need, oom):
        n = obs.settings.world_size or 1
        if n < 2:
            return
        replicated = basis.params + basis.grads + basis.optimizer_state
        saved = replicated - sharded_bytes(replicated, n)
        if saved <= 0:
            return
        yield FixEstimate(
            code=self.tip, title=f"FSDP2 over the {n} ranks", fixed_saved=saved,
            how="computed", basis=f"each rank holds {mib(replicated)} of parameters, gradients and optimizer state; "
                                  f"sharded {mib(sharded_bytes(replicated, n))} (1/{n}, the gathered unit on top)",
            time_cost=None, cost_basis="all-gathers and reduce-scatters each step (PIT705)",
            fix="fully_shard(block) for each block, then fully_shard(model); Recipe(strategy='fsdp2')")
