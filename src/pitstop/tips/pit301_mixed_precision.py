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


# --- doctor face ---
from pitstop.doctor.check import Check, pct  # noqa: E402


class MixedPrecisionCheck(Check, tip="PIT301"):
    looks_at = "autocast state of training forwards, with a bf16-vs-fp32 probe"

    def check(self, obs, th):
        probe = obs.probes.get("precision") or {}
        speedup = probe.get("speedup")
        if speedup is None or speedup < th.probe_speedup:
            return
        share = obs.compute_share * (1 - 1 / speedup)
        dtype = probe.get("dtype", "bfloat16")
        yield self.finding(
            th, title=f"Training runs in fp32; {dtype} autocast is faster on this machine",
            evidence=f"no autocast in {obs.forwards.get('train', 0)} training forwards; probe: {probe['what']} is "
                     f"{speedup:.2f}x faster under {dtype} autocast; forward+backward are {pct(obs.compute_share)} of the step.",
            fix=f"with torch.autocast(device_type, dtype=torch.{dtype}): around the forward and the loss"
                + (" (fp16 also needs torch.amp.GradScaler)" if dtype == "float16" else ""),
            share=share, seconds=share * obs.step_time["mean"])
