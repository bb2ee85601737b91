"""PIT301 mixed-precision: autocast the forward pass to bf16 (or fp16 with a GradScaler)."""

from __future__ import annotations

from pitstop.tips._base import Tip


class MixedPrecision(Tip):
    code = "PIT301"
    slug = "mixed-precision"
    title = "Training in fp32 where bf16/fp16 autocast is faster"
    faces = "DKEB"
    seeds = ("001", "002", "003", "004")
    truth = (
        "bf16 needs no GradScaler (same exponent range as fp32); fp16 does. The seeds' "
        "`torch.cuda.amp` and apex spellings are outdated (see PIT302). Mixed precision is not "
        "GPU-only: on CPUs with AVX512-BF16/AMX, bf16 autocast is faster too (a small conv "
        "training step measured 2.2x faster here, 105 ms -> 48 ms, on a 2-core Xeon with "
        "AVX512-BF16 and AMX). Seed 002's \"3x-8x\" and \"three times faster\" are GPU-specific "
        "claims; `pitstop bench PIT301` measures yours."
    )

    what = """
        Detects training whose matmuls and convolutions run in fp32 while this machine runs
        them faster in bf16 (or fp16). The doctor checks whether autocast is active during the
        forward pass and runs a one-second bf16-vs-fp32 probe before recommending it; `tune`
        measures bf16 autocast on your own training and checks that the loss stays equivalent.
    """
    why = """
        Matrix units (NVIDIA tensor cores, Intel AMX / AVX512-BF16) process 16-bit inputs at
        several times the fp32 rate, and 16-bit activations halve the memory traffic and the
        activation memory. Autocast runs the ops that are safe in low precision (matmul, conv)
        in bf16/fp16 and keeps reductions, softmax and the loss in fp32; the weights and the
        optimizer step stay fp32.
    """
    example = """
        ```python
        for x, y in loader:
            loss = loss_fn(model(x), y)   # everything in fp32
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        ```
    """
    use_instead = """
        bf16 (Ampere+ GPUs, recent Xeons), no scaler needed:
        ```python
        for x, y in loader:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)   # forward and loss only
            loss.backward()                   # outside autocast (PIT305)
            optimizer.step()
            optimizer.zero_grad()
        ```
        fp16 needs a GradScaler against gradient underflow (PIT306), and `unscale_` before
        clipping (PIT303):
        ```python
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        ```
    """
    when_not = """
        CPUs without AVX512-BF16/AMX emulate bf16 and run *slower* than fp32; GPUs before
        Ampere have no bf16 tensor cores (use fp16 + GradScaler there). Models dominated by
        data loading, small matmuls or Python overhead gain little. Some losses and custom
        ops are sensitive to reduced precision: compare the loss curve (`tune` does) before
        adopting it.
    """
    references = (
        "PyTorch docs, Automatic Mixed Precision package — torch.amp: https://pytorch.org/docs/stable/amp.html",
        "PyTorch docs, CPU autocast (bf16 on CPU): https://pytorch.org/docs/stable/amp.html#cpu-op-specific-behavior",
        "Micikevicius et al., Mixed Precision Training, ICLR 2018: https://arxiv.org/abs/1710.03740",
        "Seeds 001 (mixed precision for the forward pass), 002 (auto mixed precision), 003 (torch.cuda.amp), 004 (apex amp)",
    )
    engine = "Recipe.precision='bf16-mixed' or 'fp16-mixed' runs the forward and the loss under torch.autocast (never the backward), with a torch.amp.GradScaler for fp16 on CUDA and CPU alike."


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class AutocastKnob(Knob, tip="PIT301"):
    """bf16 autocast around the top-level model's forward (script and API); fp16 with a
    GradScaler through the engine API only.

    Script mode wraps the model's forward in ``torch.autocast(device, bfloat16)`` and turns
    its low-precision floating outputs back to fp32, so the script's own loss runs in fp32
    (what Lightning Fabric's precision plugins do). The backward stays outside autocast.
    """

    name = "autocast"
    title = "mixed precision (autocast)"
    order = 20
    reduced_precision = True

    def applies(self, ctx):
        if ctx.autocast:
            return Applicability(False, f"training forwards already run under {ctx.autocast} autocast")
        if not self.values(ctx):
            return Applicability(False, "this GPU has no bf16 (compute capability < 8.0) and fp16 needs a GradScaler "
                                        "in the script: try fp16 through pitstop.tune(...) on the engine")
        return Applicability(True)

    def values(self, ctx):
        bf16 = not ctx.on_cuda or (ctx.capability is not None and tuple(ctx.capability) >= (8, 0))
        out = ["bf16"] if bf16 else []
        if ctx.mode == "api":
            out.append("fp16")  # with the engine's GradScaler
        return out

    def label(self, value):
        return "bf16 autocast" if value == "bf16" else "fp16 autocast + GradScaler"

    def recipe_fields(self, value, ctx):
        return {"precision": "bf16-mixed" if value == "bf16" else "fp16-mixed"}

    def child_kwargs(self, value, ctx):
        return {"device": "cuda" if ctx.on_cuda else "cpu"}

    def apply_in_child(self, value, device="cpu", **options):
        if value != "bf16":
            raise ValueError(f"script mode applies bf16 autocast only (fp16 needs a GradScaler), got {value!r}")
        import torch

        from pitstop.tune.patch import on_model, to_float, wrap_forward

        def wrapper(forward):
            def autocast_forward(*args, **kwargs):
                with torch.autocast(device_type=device, dtype=torch.bfloat16):
                    out = forward(*args, **kwargs)
                return to_float(out)
            return autocast_forward

        on_model(lambda model: wrap_forward(model, wrapper), order=self.order)

    def snippet(self, value, ctx):
        dev = "cuda" if ctx.on_cuda else "cpu"
        if value == "bf16":
            return f"""
                with torch.autocast(device_type="{dev}", dtype=torch.bfloat16):
                    out = model(x)
                    loss = loss_fn(out, y)          # forward and loss only
                loss.backward()                     # outside autocast (PIT305)
                optimizer.step()
            """
        return f"""
            scaler = torch.amp.GradScaler("{dev}")
            with torch.autocast(device_type="{dev}", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        """
