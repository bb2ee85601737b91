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

    engine = ("Recipe(strategy='fsdp2') shards the model with FSDP2 under torchrun: fully_shard per block (the "
              "largest ModuleList's children, or Recipe.shard_units) and at the root, MixedPrecisionPolicy from "
              "Recipe.precision, the optimizer rebuilt on the shards, set_requires_gradient_sync(False) on the "
              "accumulated micro-batches, clipping on DTensors, and checkpoints written with "
              "torch.distributed.checkpoint that resume bitwise and on another number of ranks.")

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


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, mib, pct  # noqa: E402
from pitstop.doctor.analysis.records import MemoryRecord  # noqa: E402
from pitstop.doctor.analysis.sharding import comm_bytes_per_step, per_rank_bytes  # noqa: E402


class ReplicatedStateCheck(Check, tip="PIT706"):
    looks_at = ("a DDP rank's parameters, gradients and optimizer state (each rank holds them whole) against its "
                "accounted memory, and what FSDP2 would leave each rank")

    def skip_reason(self, obs):
        d = obs.distributed
        rank = d.ranks[0] if d is not None and d.ranks else None
        if rank is None or rank.world_size < 2 or not d.initialized:
            return "not a data-parallel job of two ranks or more"
        if rank.shard is not None:
            return f"the model is sharded already ({rank.shard.framework})"
        if not any(m.ddp for m in obs.models):
            return "no DistributedDataParallel model in this run"
        return super().skip_reason(obs)

    def check(self, obs, th):
        rank = obs.distributed.ranks[0]
        m = obs.memory or MemoryRecord()
        params, state = m.params or 0, m.optimizer_state or 0
        grads = m.grads if m.grads is not None else params
        replicated = params + grads + state
        accounted = m.accounted
        pressure = bool(m.pressure and m.pressure > th.memory_share)
        if not accounted or not replicated or (replicated / accounted < th.shard_state_share and not pressure):
            return
        world = rank.world_size
        blocks = rank.block_bytes
        largest = max(blocks) if blocks else 0
        sharded = per_rank_bytes(params, grads, state, world, largest_unit=largest)
        regathered = params - (blocks[-1] if blocks else 0)  # every block but the last gathered again in backward
        comm = comm_bytes_per_step(params, grads, world, regathered=regathered)
        now = rank.mean("allreduce_bytes")
        gathered = f" plus {mib(largest)} while its largest block computes (gathered whole)" if largest else ""
        yield self.finding(
            th, title=f"Every rank holds the whole training state: FSDP2 would leave each of the {world} ranks "
                      f"{pct(sharded.state / replicated)} of it",
            evidence=f"each rank holds parameters {mib(params)} + gradients {mib(grads)} + optimizer state {mib(state)} "
                     f"= {mib(replicated)}, {pct(replicated / accounted)} of its accounted memory; sharded over {world} "
                     f"ranks (FSDP2, from these sizes) each would hold {mib(sharded.state)}{gathered}. The cost: "
                     f"all-gathers of {mib(comm.all_gather)} and reduce-scatters of {mib(comm.reduce_scatter)} per "
                     f"step and rank (DDP all-reduces {mib(now)} per step now)"
                     + ("" if pressure else "; memory is not near capacity, so this is for information") + ".",
            fix="shard with FSDP2: `fully_shard(block)` for each block, then `fully_shard(model)`, and build the "
                "optimizer after it (pitstop's engine: Recipe(strategy='fsdp2')); `pitstop tune --nproc-per-node "
                f"{world} --only PIT706` measures what it costs the step; only the optimizer state: "
                "torch.distributed.optim.ZeroRedundancyOptimizer",
            kind="memory", share=(replicated - sharded.peak) / m.peak if m.peak else None,
            nbytes=replicated - sharded.peak, severity="medium" if pressure else "low")


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class ShardKnob(Knob, tip="PIT706"):
    name = "fsdp2"
    title = "FSDP2 instead of DDP (parameters, gradients, optimizer state sharded)"
    modes = ("script",)  # a torchrun job; the in-process API tuner runs one process
    order = 5  # the model is replaced at DDP construction, before any other knob sees it

    def applies(self, ctx):
        if ctx.strategy != "ddp":
            return Applicability(False, "the job does not use DistributedDataParallel"
                                 + (f" (it shards with {ctx.strategy})" if ctx.strategy else ""))
        if ctx.world_size < 2:
            return Applicability(False, "one rank: nothing to shard over")
        return Applicability(True)

    def values(self, ctx):
        return ["fsdp2"]

    def label(self, value):
        return "strategy=fsdp2"

    def recipe_fields(self, value, ctx):
        return {"strategy": "fsdp2"}

    def child_kwargs(self, value, ctx):
        return {}

    def apply_in_child(self, value, **options):
        from pitstop.tune.patch import ddp_as_fsdp2

        ddp_as_fsdp2()

    def snippet(self, value, ctx):
        return """
            from torch.distributed.fsdp import fully_shard
            # instead of model = DDP(model): one unit per block (your model's block list), then the root
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
            optimizer = torch.optim.AdamW(model.parameters(), lr=...)  # built after fully_shard: shards only
            # no_sync(): model.set_requires_gradient_sync(False) on all but the last micro-batch
        """


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402


class ShardFix(MemoryFix, tip="PIT706"):
    """Sharding parameters, gradients and optimizer state over the job's ranks (FSDP2):
    computed from the bytes each rank held at the peak and the world size."""

    title = "shard the training state over the ranks"

    def estimate(self, basis, obs, *, limit, need, oom):
        n = obs.settings.world_size or 1
        if n < 2:
            return
        replicated = basis.params + basis.grads + basis.optimizer_state
        sharded = per_rank_bytes(basis.params, basis.grads, basis.optimizer_state, n).state
        saved = replicated - sharded
        if saved <= 0:
            return
        yield FixEstimate(
            code=self.tip, title=f"FSDP2 over the {n} ranks", fixed_saved=saved,
            how="computed", basis=f"each rank holds {mib(replicated)} of parameters, gradients and optimizer state; "
                                  f"sharded {mib(sharded)} (1/{n}, the gathered unit on top)",
            time_cost=None, cost_basis="all-gathers and reduce-scatters each step (PIT705)",
            fix="fully_shard(block) for each block, then fully_shard(model); Recipe(strategy='fsdp2')")
