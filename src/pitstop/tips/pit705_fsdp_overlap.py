"""PIT705 fsdp-overlap: FSDP all-gathers or reduce-scatters the compute waits for."""

from __future__ import annotations

from pitstop.catalog import Tip


class FsdpOverlapTip(Tip):
    code = "PIT705"
    slug = "fsdp-overlap"
    title = "Sharded training waits for its all-gathers or reduce-scatters (exposed FSDP communication)"
    faces = "DTK"
    seeds = ()
    truth = ("size the exposed communication per block and step; the fix is the setting that hides it "
             "(wrap each block, set_modules_to_forward_prefetch / set_modules_to_backward_prefetch, "
             "MixedPrecisionPolicy(param_dtype=bf16) halves all-gather bytes, reshard_after_forward=False on "
             "the last blocks); on one node with fast links the cost is often small: measure")

    what = """
        In a sharded job (FSDP2 `fully_shard`, or FSDP1 `FullyShardedDataParallel`, directly or
        through Lightning, Accelerate or the Hugging Face Trainer), each unit's parameters are
        all-gathered before its forward and backward and its gradients reduce-scattered after
        its backward. FSDP overlaps these collectives with the compute of neighbouring units;
        this tip measures how much of them the compute still waits for (exposed communication)
        per step and, where the trace allows, per unit, and names the cause: one unit at the
        root only (nothing to overlap with), no prefetch, all-gathers in fp32, or the last
        blocks resharded after forward only to be gathered again at once for backward.
    """
    why = """
        A unit's forward cannot start before its parameters are gathered. When the whole model
        is one unit, the all-gather of every parameter happens before the first layer runs and
        nothing overlaps it; with one unit per block, block k+1's all-gather runs while block k
        computes, so only the first is exposed. The same holds backward for reduce-scatters.
        All-gathers move parameter bytes, so gathering in fp32 moves twice what bf16 needs; and
        resharding the last block after forward forces an all-gather that backward needs at once.
    """
    example = """
        ```python
        from torch.distributed.fsdp import fully_shard
        model = Transformer(cfg)
        fully_shard(model)                  # one unit: every parameter gathered up front, nothing overlaps
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        ```
    """
    use_instead = """
        ```python
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for i, block in enumerate(model.layers):            # one unit per block: overlap
            last = i == len(model.layers) - 1
            fully_shard(block, mp_policy=mp, reshard_after_forward=not last)
        fully_shard(model, mp_policy=mp)
        ```
        `pitstop doctor --nproc-per-node N` sizes the exposed time per step; `pitstop trace`
        reads it from one profiler trace per rank; `pitstop tune` measures the settings.
    """
    when_not = """
        On one node with fast links (NVLink) and large blocks, FSDP's default per-block wrapping
        already hides most communication: the exposed time is small, and the doctor says so with
        the number. On CPU with gloo the collectives are slow and synchronous: the shares
        measured there say little about a GPU job. Keeping parameters gathered after forward
        (`reshard_after_forward=False`) trades memory for the all-gather it saves.
    """
    references = (
        "PyTorch docs, torch.distributed.fsdp.fully_shard (FSDP2: MixedPrecisionPolicy, reshard_after_forward, prefetch): https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html",
        "PyTorch tutorial, Getting Started with Fully Sharded Data Parallel (FSDP2): https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html",
        "Zhao et al., PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel (VLDB 2023): https://arxiv.org/abs/2304.11277",
        "Beyond the seeds; related: PIT706 (shard-state), PIT704 (straggler)",
    )
