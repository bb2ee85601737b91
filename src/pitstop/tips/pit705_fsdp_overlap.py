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


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, mib, ms, pct  # noqa: E402


def _shard(obs):
    """This rank's :class:`~pitstop.doctor.analysis.dist_records.ShardRecord`, or None."""
    d = obs.distributed
    return d.ranks[0].shard if d is not None and d.ranks and d.ranks[0].shard is not None else None


def _blocks_code(blocks: tuple[str, ...]) -> str:
    """``model.blocks`` from ``("blocks.0", "blocks.1")``: the list a loop wraps."""
    prefix = blocks[0].rsplit(".", 1)[0] if blocks and "." in blocks[0] else ""
    return f"model.{prefix}" if prefix else "model.children()"


def shard_causes(shard, on_gpu: bool) -> list[tuple[str, str, str]]:
    """``(cause, evidence, fix)`` for what leaves FSDP's collectives exposed, the one to fix
    first first. "No prefetch" is a GPU cause only: with gloo the collectives block, and an
    earlier all-gather overlaps nothing."""
    causes = []
    units, blocks = shard.units, shard.blocks
    total = sum(u.numel for u in units) or 1
    if shard.root_only:
        big = max(units, key=lambda u: u.numel)
        causes.append((
            "root only",
            f"one unit ({big.name or 'the root'}) holds {pct(big.numel / total)} of the parameters while the model has "
            f"{len(blocks)} blocks ({', '.join(blocks[:3])}{' ...' if len(blocks) > 3 else ''}): every parameter is "
            "gathered before the first layer runs, nothing can overlap it, and the whole model stays gathered",
            f"wrap each block first: `for block in {_blocks_code(blocks)}: fully_shard(block)`, then "
            "`fully_shard(model)` (FSDP1: auto_wrap_policy=ModuleWrapPolicy({Block}))"))
    gather = shard.param_dtype or shard.stored_dtype
    if gather == "float32":
        causes.append((
            "fp32 all-gathers", f"all-gathers move fp32 parameters ({mib(shard.mean('all_gather_bytes'))} per step)",
            "gather in bf16: `fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
            "reduce_dtype=torch.float32))` halves the all-gather bytes (FSDP1: MixedPrecision(param_dtype=bfloat16))"))
    last = next((u for u in units if blocks and u.name == blocks[-1]), None)
    if shard.framework == "fsdp2" and last is not None and last.reshard_after_forward:
        causes.append((
            "last block resharded",
            f"the last block ({last.name}) is resharded after forward and gathered again at once for backward",
            f"keep it: `fully_shard({_blocks_code(blocks)}[-1], reshard_after_forward=False)`"))
    prefetch = any(u.forward_prefetch or u.backward_prefetch for u in units) or shard.forward_prefetch
    if on_gpu and not shard.root_only and not prefetch:
        causes.append((
            "no prefetch", "no unit prefetches the next one's all-gather explicitly",
            "`block.set_modules_to_forward_prefetch([next_block])` and `set_modules_to_backward_prefetch([previous])` "
            "(FSDP1: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)"))
    return causes


def _saved(cause: str, shard, step: float, on_gpu: bool) -> float | None:
    """The share of the step a cause's fix could save (None: cannot be sized here)."""
    ag = shard.mean("all_gather_s")
    if cause == "fp32 all-gathers":
        return 0.5 * ag / step
    if cause == "last block resharded":
        last = next(u for u in shard.units if u.name == shard.blocks[-1])
        return 0.5 * last.all_gather_s / step if last.all_gathers else None
    if cause == "root only" and on_gpu:
        return (ag + shard.mean("reduce_scatter_s")) * (1 - 1 / max(2, len(shard.blocks))) / step
    return None


class FsdpExposedCheck(Check, tip="PIT705"):
    looks_at = ("a sharded model's units and settings, and the seconds per step the rank spent inside FSDP's "
                "all-gathers and reduce-scatters")
    gpu_role = "trace"  # on CUDA the collectives return at once: a trace says what the compute waited for

    def skip_reason(self, obs):
        if _shard(obs) is None:
            return "no FSDP-sharded model in this run (fully_shard / FullyShardedDataParallel under torchrun)"
        return super().skip_reason(obs)

    def check(self, obs, th):
        shard = _shard(obs)
        step = obs.mean_step
        if not step or not shard.all_gather_s:
            return
        ag, rs = shard.mean("all_gather_s"), shard.mean("reduce_scatter_s")
        exposed = (ag + rs) / step
        causes = shard_causes(shard, obs.on_cuda)
        # on CUDA the host times are launches: the trace of the profiled steps decides (gpu_role)
        if not causes or (not obs.on_cuda and exposed < th.exposed_communication and not shard.root_only):
            return
        cause, why, fix = causes[0]
        saved = _saved(cause, shard, step, obs.on_cuda)
        where = ""
        if not obs.on_cuda and cause == "root only":
            where = ("; on CPU with gloo every collective blocks, so wrapping per block overlaps nothing here (it "
                     "lowers the peak: one block gathered at a time); the overlap it enables is a GPU's")
        elif saved is not None:
            where = f"; the fix could save about {pct(saved)} of the step (estimated from the bytes it no longer moves)"
        measured = (f"{shard.framework.upper()}, {len(shard.units)} unit(s) over {shard.world_size} ranks: "
                    f"{ms(ag)} in {shard.mean('all_gathers'):.0f} all-gather(s) and {ms(rs)} in "
                    f"{shard.mean('reduce_scatters'):.0f} reduce-scatter(s) per step = {pct(exposed)} of the "
                    f"{ms(step)} step" + (", host time inside the calls (on the GPU they overlap as the trace shows)"
                                          if obs.on_cuda else ", all of it time the compute waited for"))
        others = "; ".join(f"{c}: {f}" for c, _, f in causes[1:])
        severity = None if saved is not None else ("medium" if exposed >= th.exposed_communication else "low")
        yield self.finding(
            th, title=f"Sharded training waits for its collectives: {cause}",
            evidence=f"{measured}; {why}{where}.", fix=fix + (f"; also {others}" if others else ""),
            share=saved, seconds=(ag + rs), severity=severity)


# --- trace face ---
from pitstop.trace.check import TraceCheck  # noqa: E402


class FsdpExposedTrace(TraceCheck, tip="PIT705"):
    looks_at = ("FSDP's all-gathers and reduce-scatters (NCCL/RCCL kernels by name, FSDP2's per-unit annotations; "
                "on CPU the blocking host time) and the part no compute overlaps")

    def check(self, rank, th):
        c = rank.collectives
        if c is None or not c.sharding or c.fsdp_exposed_share < th.exposed_communication:
            return
        ag, rs = c.kind("all_gather"), c.kind("reduce_scatter")
        on_gpu = c.source == "gpu kernels"
        parts = [f"{k.kind.replace('_', '-')} {ms(k.seconds_per_step)} per step in {k.calls_per_step:g} call(s), "
                 f"{ms(k.exposed_per_step)} exposed" for k in (ag, rs) if k is not None]
        top = ", ".join(f"{u.unit or '(root)'} {ms(u.all_gather_s + u.reduce_scatter_s)}" for u in c.units[:3])
        evidence = (f"{c.sharding.upper()} ({c.source}): {'; '.join(parts)}; {pct(c.fsdp_exposed_share)} of the step "
                    "waited for them" + (f"; most exposed units: {top}" if top else ""))
        severity = None
        if c.root_only:
            title = "FSDP gathers every parameter through the root unit: nothing overlaps"
            fix = ("wrap each block before the root (`for block in model.layers: fully_shard(block)`, then "
                   "`fully_shard(model)`): block k+1's all-gather then runs while block k computes")
        elif (ag.exposed_per_step if ag else 0.0) >= (rs.exposed_per_step if rs else 0.0):
            title = "FSDP's all-gathers are exposed: the compute waits for parameters"
            fix = ("prefetch explicitly (`block.set_modules_to_forward_prefetch([next_block])`, "
                   "`set_modules_to_backward_prefetch([previous_block])`), gather in bf16 where they are fp32 "
                   "(`MixedPrecisionPolicy(param_dtype=torch.bfloat16)`: half the bytes), and keep the last block "
                   "gathered (`reshard_after_forward=False`)")
        else:
            title = "FSDP's reduce-scatters are exposed: backward waits for gradient reductions"
            fix = ("reduce fewer times (`set_requires_gradient_sync(False)` on all but the last micro-batch of an "
                   "accumulation), and let the next block's backward overlap them (one unit per block)")
        if not on_gpu:  # gloo: blocking collectives; only moving fewer bytes shortens them here
            evidence += "; on CPU (gloo) every collective blocks, so all of it is exposed and nothing overlaps it here"
            if not c.root_only:
                title = "FSDP's collectives take the step (CPU, gloo: nothing overlaps)"
                fix = ("move fewer bytes: gather in bf16 where the all-gathers are fp32 "
                       "(`MixedPrecisionPolicy(param_dtype=torch.bfloat16)`; the trace does not show the dtype, "
                       "`pitstop doctor` does), keep the last block gathered (`reshard_after_forward=False`); "
                       "prefetch and per-block overlap pay on GPUs (NCCL on its own streams)")
            severity = "medium"
        yield self.finding(th, rank, title=title, evidence=evidence, fix=fix, impact=c.fsdp_exposed_share,
                           severity=severity)


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class Fsdp2SettingsKnob(Knob, tip="PIT705"):
    name = "fsdp2-settings"
    title = "FSDP2: prefetch the next block's all-gather, or keep blocks gathered after forward"
    modes = ("script",)

    def applies(self, ctx):
        if ctx.strategy != "fsdp2":
            return Applicability(False, "the job does not shard with FSDP2 (fully_shard)")
        return Applicability(True)

    def values(self, ctx):
        return ["prefetch", "keep-gathered"]

    def label(self, value):
        return {"prefetch": "shard_prefetch", "keep-gathered": "reshard_after_forward=False"}[value]

    def recipe_fields(self, value, ctx):
        if value == "prefetch":
            return {"strategy": "fsdp2", "shard_prefetch": True}
        return {"strategy": "fsdp2", "reshard_after_forward": False}

    def child_kwargs(self, value, ctx):
        return {}

    def apply_in_child(self, value, **options):
        from pitstop.tune.patch import on_model
        from pitstop.engine.sharded import fsdp2_settings

        on_model(lambda model: fsdp2_settings(model, value), order=15)

    def snippet(self, value, ctx):
        if value == "prefetch":
            return """
                blocks = list(model.layers)  # the blocks you fully_shard-ed, in forward order
                for a, b in zip(blocks, blocks[1:]):
                    a.set_modules_to_forward_prefetch([b])
                    b.set_modules_to_backward_prefetch([a])
            """
        return """
            model.set_reshard_after_forward(False)  # every unit stays gathered from forward to backward: more memory
        """
