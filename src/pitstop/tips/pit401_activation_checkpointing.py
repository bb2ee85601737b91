"""PIT401 activation-checkpointing: recompute cheap blocks in backward instead of storing them."""

from __future__ import annotations

from pitstop.catalog import Tip


class ActivationCheckpointing(Tip):
    code = "PIT401"
    slug = "activation-checkpointing"
    title = "Activations dominate memory: recompute blocks in backward with torch.utils.checkpoint"
    faces = "DKE"
    seeds = ("002", "003")
    truth = (
        "It trades compute for memory: the checkpointed blocks' forward runs again during "
        "backward, at most one extra forward of those blocks (about +33% when the forward is a "
        "third of the step). With `use_reentrant=False` the recomputation stops as soon as the "
        "needed tensors exist, so it often costs less. Measured here on 8 pre-norm MLP blocks "
        "(width 512, hidden 2048, batch 16x256 tokens, fp32, 2-core Xeon): matmul work per step "
        "412 -> 481 GFLOP (+17%; 550 GFLOP without the early stop), CPU time +12-15% "
        "(single thread, shared machine), and the growth of the process's peak RSS over one "
        "forward+backward (64 MiB of gradients included) ~785 -> ~375 MiB. It pays off only when the memory it frees lets the "
        "batch or the model grow; seed 003's list of what to recompute (activations, up/down "
        "sampling, small matrix-vector ops) is the cheap end of that trade."
    )

    what = """
        At run time the doctor measures how the step's peak memory splits between parameters,
        gradients, optimizer state and activations (PIT402), and points here when activations
        dominate and memory, not compute, limits the batch size. `tune` measures step time
        and peak memory with checkpointing on and off on your own training.
    """
    why = """
        Autograd keeps every tensor the backward pass needs (layer inputs, pre-activation
        values, attention maps) from the forward pass until the backward has used it; for deep
        or wide models with long sequences or large images these saved activations, which grow
        with batch size, outweigh the parameters many times. `torch.utils.checkpoint` stores
        only a block's inputs and rebuilds its intermediate tensors in the backward pass by
        running the block's forward again. Memory then grows with the number of blocks times
        their input size plus one block's internals, instead of with every intermediate
        tensor of every block.
    """
    example = """
        ```python
        class Net(nn.Module):
            def forward(self, x):
                for block in self.blocks:
                    x = block(x)          # every block's intermediates kept for backward
                return self.head(x)
        ```
    """
    use_instead = """
        ```python
        from torch.utils.checkpoint import checkpoint

        class Net(nn.Module):
            def forward(self, x):
                for block in self.blocks:
                    x = checkpoint(block, x, use_reentrant=False)   # PIT407
                return self.head(x)
        ```
        Then spend the freed memory: raise the batch size (or drop gradient accumulation,
        PIT406) and measure samples per second. Checkpoint blocks that are cheap to recompute
        relative to what they store (norms, activations, MLP blocks); keep the expensive ones.
    """
    when_not = """
        When memory is not the limit it is pure slowdown: the same batch takes longer (+12-15%
        here). It saves nothing when parameters, gradients or optimizer state dominate
        (PIT402), and little for shallow models with small activations. Dropout is replayed
        with the saved RNG state (`preserve_rng_state=True`, the default), but other side
        effects of a block run twice: a checkpointed `BatchNorm1d` counted 2 batches after
        one training step here (`num_batches_tracked`), so its running statistics are
        updated twice per step.
    """
    references = (
        "PyTorch docs, torch.utils.checkpoint: https://pytorch.org/docs/stable/checkpoint.html",
        "PyTorch Performance Tuning Guide — Checkpoint intermediate buffers: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Chen et al., Training Deep Nets with Sublinear Memory Cost, 2016: https://arxiv.org/abs/1604.06174",
        "Seed 002 (Gradient checkpointing), seed 003 (store only the outputs needed in forward; torch.utils.checkpoint)",
    )
    engine = "Recipe.checkpoint_activations names submodules (fnmatch patterns) whose forward make_step runs under torch.utils.checkpoint.checkpoint(..., use_reentrant=False) while training; state_dict keys are unchanged."


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, mib, pct  # noqa: E402
from pitstop.doctor.analysis.records import MemoryRecord  # noqa: E402


class ActivationMemoryCheck(Check, tip="PIT401"):
    looks_at = "activation share of memory when the peak is near capacity"

    def check(self, obs, th):
        m = obs.memory or MemoryRecord()
        peak, cap, acts = m.peak, m.capacity, m.activations
        if not peak or not cap or not acts or peak / cap <= th.memory_share:
            return
        accounted = m.accounted
        if not accounted or acts / accounted <= th.activation_share:
            return
        yield self.finding(
            th, title="Activations dominate memory and memory is nearly full",
            evidence=f"peak {mib(peak)} is {pct(peak / cap)} of {mib(cap)}; activations saved for backward are "
                     f"{mib(acts)}, {pct(acts / accounted)} of params+grads+optimizer state+activations.",
            fix="torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) on the largest blocks",
            kind="memory", share=acts / peak / 2, nbytes=acts // 2, severity="high")


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class CheckpointKnob(Knob, tip="PIT401"):
    """Activation checkpointing of the model's repeated blocks: a memory knob. It makes a
    step slower, never faster, so it is not A/B-timed on its own: the batch-size sweep of
    ``pitstop.tune(...)`` and the memory-budget search (``pitstop tune --memory-budget``,
    :mod:`pitstop.tune.memfit.search`) use it to find what fits. In script mode each block's forward
    runs under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` while training."""

    name = "checkpoint"
    title = "activation checkpointing"
    memory_role = "recompute"
    order = 60

    def applies(self, ctx):
        if not ctx.blocks:
            return Applicability(False, "no submodule blocks to recompute were found in the model")
        return Applicability(True)

    def values(self, ctx):
        return [list(ctx.blocks)]

    def label(self, value):
        return "checkpoint " + ",".join(value)

    def recipe_fields(self, value, ctx):
        return {"checkpoint_activations": tuple(value)}

    def apply_in_child(self, value, **options):
        from pitstop.tune.patch import on_model

        on_model(lambda model: checkpoint_blocks(model, value), order=self.order)

    def snippet(self, value, ctx):
        return f"""
            recipe = pitstop.Recipe(checkpoint_activations={tuple(value)!r})   # recompute in backward
            # by hand: out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        """


def checkpoint_blocks(model, patterns):
    """Run the forward of each submodule whose name matches ``patterns`` (fnmatch) under
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` while training (script mode)."""
    from fnmatch import fnmatch

    import torch
    from torch.utils.checkpoint import checkpoint

    def wrap(module, forward):
        def recompute(*args, **kwargs):
            if module.training and torch.is_grad_enabled():
                return checkpoint(forward, *args, use_reentrant=False, **kwargs)
            return forward(*args, **kwargs)
        return recompute

    for name, module in model.named_modules():
        if name and any(fnmatch(name, p) for p in patterns):
            module.forward = wrap(module, module.forward)


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402


class CheckpointFix(MemoryFix, tip="PIT401"):
    """Checkpointing the repeated blocks keeps only each block's inputs; in backward one block
    at a time is rebuilt. At each moment of the profiled step that could be the peak, it saves
    what the blocks then held besides their inputs, less the internals of a block whose
    backward was running (rebuilt then); it costs one more forward of the blocks (their
    forward time, measured in the observed steps)."""

    title = "activation checkpointing of the repeated blocks"

    def estimate(self, basis, obs, *, limit, need, oom):
        p = obs.memory_profile
        blocks, pattern = (p.blocks, p.blocks_pattern) if p is not None and p.blocks else (
            (oom.blocks, oom.blocks_pattern) if oom is not None and oom.blocks else ((), ""))
        if len(blocks) < 2:
            return
        saved = [_moment_saving(m, blocks) for m in basis.moments]
        if max(saved, default=0) <= 0:
            return
        inner = [max(0, b.saved - b.input) for b in blocks]
        timed = [b.seconds for b in blocks if b.seconds is not None]
        cost, why = None, "the blocks' forward was not timed (no observed step)"
        if timed and len(timed) == len(blocks) and obs.step_time is not None and obs.step_time.median:
            cost = min(sum(timed), obs.breakdown.forward if obs.breakdown else sum(timed)) / obs.step_time.median
            why = f"one more forward of the {len(blocks)} blocks: {1e3 * sum(timed):.1f} ms per observed step"
        yield FixEstimate(
            code=self.tip, title=f"checkpoint {pattern} ({len(blocks)} blocks)", moment_saved=saved,
            how="measured" if p is not None and p.blocks else "computed",
            basis=(f"the {len(blocks)} blocks saved {mib(sum(b.saved for b in blocks))} for backward, of which "
                   f"{mib(sum(b.input for b in blocks))} are their inputs (kept when checkpointed); one block at a "
                   f"time is rebuilt in backward ({mib(max(inner))})"),
            time_cost=cost, cost_basis=why,
            fix=f"Recipe(checkpoint_activations=({pattern!r},)), or torch.utils.checkpoint.checkpoint(block, x, "
                "use_reentrant=False) in the forward",
            caveat="a block's side effects (BatchNorm statistics) run twice")


def _moment_saving(moment, blocks) -> float:
    """Bytes checkpointing frees at one moment: the blocks' internals alive then, less a block
    being back-propagated (rebuilt at that time)."""
    alive = {b.name: sum(m.bytes for m in moment.by_module if m.module == b.name or m.module.startswith(b.name + "."))
             for b in blocks}
    held = sum(max(0, alive[b.name] - b.input) for b in blocks)
    running = [max(0, b.saved - b.input) for b in blocks if b.saved and b.input < alive[b.name] < 0.95 * b.saved]
    return max(0.0, held - max(running, default=0))
