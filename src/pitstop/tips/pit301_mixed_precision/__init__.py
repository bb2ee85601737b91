"""PIT301 mixed-precision: autocast the forward pass to bf16 (or fp16 with a GradScaler)."""

from __future__ import annotations

from pitstop.catalog import Tip


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
        measures bf16 autocast (fp16 + GradScaler on GPUs before Ampere, your script's backward,
        clipping and step run through the scaler) on your training, the loss checked equivalent.
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
        CPUs without AVX512-BF16/AMX emulate bf16 and run *slower* than fp32 (the bundled CNN's
        forward+backward: 0.06x, about 18x slower, with oneDNN capped at AVX2 by
        `ONEDNN_MAX_CPU_ISA=AVX2` on an AMD EPYC whose AVX512-BF16 made it 1.69x faster
        uncapped; docs/guide/hardware.md); GPUs before
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


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Measurement, Outcome  # noqa: E402


class MixedPrecisionBench(Benchmark, tip="PIT301"):
    title = "Training step: fp32 vs 16-bit autocast (bf16; fp16 where it runs): conv net on CPU, MLP blocks on GPU"
    claim = Claim(
        seed="002",
        text="16-bit training ... can make your code run three times faster",
        baseline="fp32",
        candidate="16-bit autocast",
        ratio=3.0,
        ratio_of="median time of a training step in fp32 / under 16-bit autocast",
        scope="gpu",  # seed 002: "Certain GPUs (V100, 2080Ti) give you automatic speed-ups (3x-8x faster)"
    )

    def run(self, ctx):
        import contextlib

        import torch
        from torch import nn
        from torch.nn import functional as F

        from pitstop.examples.models import make_cnn

        torch.manual_seed(0)
        if ctx.cuda:
            # The seed's 3x is tensor-core matmul throughput; a GPU step must be matmul-bound to
            # show it: on an H100 the CPU's SmallCNN at batch 64 took 2.1 ms, all launch overhead
            # (measured 0.89x). Transformer-style MLP blocks, 8192 tokens x 1024 wide.
            tokens, width, depth = ctx.size(tiny=(64, 64, 1), quick=(4096, 1024, 2), full=(8192, 1024, 4))
            blocks = [nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                    nn.LayerNorm(width)) for _ in range(depth)]
            model = nn.Sequential(*blocks, nn.Linear(width, 1024)).to(ctx.device)
            x = torch.randn(tokens, width, device=ctx.device)
            y = torch.randint(0, 1024, (tokens,), device=ctx.device)
            workload = (f"{depth} MLP block(s) (Linear({width}, {4 * width}) + GELU + Linear({4 * width}, {width}) + "
                        f"LayerNorm) and a Linear({width}, 1024) head, {tokens} tokens, forward + cross-entropy + "
                        f"backward on {ctx.device} (matmul-bound, as a transformer's MLP); fp32 matmuls at torch's "
                        f"default precision ('highest': no TF32)")
        else:
            batch = ctx.size(tiny=4, quick=16, full=64)
            model = make_cnn(naive=False, width=32).to(ctx.device)
            x = torch.randn(batch, 3, 32, 32, device=ctx.device)
            y = torch.randint(0, 10, (batch,), device=ctx.device)
            workload = (f"SmallCNN (3 conv-BN-ReLU blocks, width 32, linear head) forward + cross-entropy + "
                        f"backward, batch {batch} of 3x32x32 on {ctx.device}")
        half = torch.bfloat16
        if ctx.cuda and not torch.cuda.is_bf16_supported():
            half = torch.float16  # GPUs before Ampere: fp16 tensor cores only
        dtype_name = {torch.bfloat16: "bf16", torch.float16: "fp16"}

        def step(dtype, xb=x, yb=y):
            model.zero_grad(set_to_none=True)
            cast = torch.autocast(ctx.device, dtype=dtype) if dtype is not None else contextlib.nullcontext()
            with cast:
                loss = F.cross_entropy(model(xb), yb)  # forward and loss under autocast
            loss.backward()                           # backward outside (PIT305)

        variants = {"fp32": lambda: step(None), "16-bit autocast": lambda: step(half)}
        notes = {"16-bit autocast": dtype_name[half]}
        comparisons, extra_notes = [], []
        probes = []
        if half is torch.bfloat16:
            # fp16 autocast runs on CPUs too, but some ops (e.g. conv backward) may take a slow
            # path: one probe step each at batch 1 decides whether fp16 is worth timing at all.
            # Each probe step runs once untimed first: a first fp16 call loads kernels and picks
            # cuDNN algorithms (on the H100 an unwarmed fp16 probe took 177 ms vs 2.9 ms in fp32).
            try:
                step(None, x[:1], y[:1])
                step(torch.float16, x[:1], y[:1])
                fp32_1 = ctx.first_call(lambda: step(None, x[:1], y[:1]))
                fp16_1 = ctx.first_call(lambda: step(torch.float16, x[:1], y[:1]))
            except (RuntimeError, TypeError) as exc:
                extra_notes.append(f"fp16 autocast does not run on {ctx.device} here: {str(exc).splitlines()[0]}")
            else:
                if fp16_1 <= 5 * fp32_1:
                    variants["fp16 autocast"] = lambda: step(torch.float16)
                    comparisons.append(Comparison("fp32", "fp16 autocast", "fp32 vs fp16 autocast"))
                else:
                    probes = [Measurement("probe: fp32 step, batch 1", (fp32_1,), info=True),
                              Measurement("probe: fp16 autocast step, batch 1", (fp16_1,), info=True)]
                    extra_notes.append(f"fp16 autocast is not timed: one warmed-up step at batch 1 took {fp16_1:.2f} s vs "
                                       f"{fp32_1 * 1e3:.1f} ms in fp32 ({fp16_1 / fp32_1:.0f}x slower; a slow "
                                       f"fp16 path on this {ctx.device}).")
        measured = ctx.time(variants, notes=notes)
        if not ctx.cuda:  # a large bf16 slowdown that this CPU (or oneDNN's cap) explains
            from pitstop.machine import bf16_slowdown_note
            from pitstop.stats import median

            by_name = {m.name: median(m.samples) for m in measured}
            note = bf16_slowdown_note(by_name["fp32"] / by_name["16-bit autocast"])
            if note is not None:
                extra_notes.append(f"{note.text()}.")
        return Outcome(
            workload=f"{workload}; the candidate autocasts to {dtype_name[half]}; no GradScaler in the timed step",
            measurements=[*measured, *probes],
            comparisons=comparisons,
            notes=[*extra_notes, "The seed's 3x (and 3x-8x) is about NVIDIA GPUs with fp16 tensor cores (V100, "
                   "2080Ti). On CPUs bf16 is fast only with AVX512-BF16/AMX (see the CPU flags) and emulated, "
                   "slower, without them."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402


class MixedPrecisionCheck(Check, tip="PIT301"):
    looks_at = "autocast state of training forwards, with a bf16-vs-fp32 probe"
    #: the precision option of each framework, for bf16 and fp16 (fp16 frameworks add the scaler)
    framework_fixes = {"lightning": 'Trainer(precision="{lightning}")', "fabric": 'Fabric(precision="{lightning}")',
                       "transformers": "TrainingArguments({hf}=True)",
                       "accelerate": 'Accelerator(mixed_precision="{accelerate}")'}

    def framework_fix(self, framework, finding, obs):
        probe = obs.probe(PrecisionProbe.key())
        fp16 = probe is not None and probe.dtype == "float16"
        template = self.framework_fixes.get(framework)
        return template and template.format(lightning="16-mixed" if fp16 else "bf16-mixed",
                                            hf="fp16" if fp16 else "bf16", accelerate="fp16" if fp16 else "bf16")

    def role(self, obs):
        # the probe's measured ratio decides when it ran; without it (--no-probes, a probe that
        # failed) the profiled window's fp32 GEMM/conv kernels decide (trace face, Fp32MathTrace)
        return "live" if probe_gain(obs.probe(PrecisionProbe.key())) is not None else "both"

    def check(self, obs, th):
        probe = obs.probe(PrecisionProbe.key())
        g = probe_gain(probe)
        if g is None or g.low < th.probe_speedup:
            return
        # conservative: the interval's lower bound, on the forward+backward share only
        share = obs.compute_share * (1 - 1 / g.low)
        dtype = probe.dtype or "bfloat16"
        yield self.finding(
            th, title=f"Training runs in fp32; {dtype} autocast measured faster on this machine",
            evidence=f"no autocast in {obs.forwards.train} training forwards; probe: {probe.what} is "
                     f"{gain_text(g)} faster under {dtype} autocast; forward+backward are {pct(obs.compute_share)} "
                     f"of the step; {ESTIMATE_NOTE}.",
            fix=f"with torch.autocast(device_type, dtype=torch.{dtype}): around the forward and the loss"
                + (" (fp16 also needs torch.amp.GradScaler)" if dtype == "float16" else ""),
            share=share, seconds=share * obs.mean_step)


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class AutocastKnob(Knob, tip="PIT301"):
    """16-bit autocast of the top-level model's training forwards (outputs back to fp32: the
    script's loss runs in fp32, as the snippet's; evaluation under ``no_grad`` left as written):
    bf16 where the device runs it fast, fp16 with a GradScaler where it does not (CUDA before
    8.0: no bf16 tensor cores); the other value is reported as not tried, with why
    (``TuneOptions.try_values`` asks for it anyway). Script-mode fp16 runs the script's backward,
    clipping and steps through one scaler (:func:`pitstop.tune.patch.grad_scaler`), and is not run
    where the survey saw nothing safe to patch (:func:`pitstop.tune.patch.scaler_blocker`)."""

    name = "autocast"
    title = "mixed precision (autocast)"
    order = 20
    reduced_precision = True

    def applies(self, ctx):
        return Applicability(not ctx.autocast, ctx.autocast and f"training forwards already run under {ctx.autocast} autocast")

    @staticmethod
    def bf16_fast(ctx):  # a CPU (AVX512-BF16/AMX where present), or CUDA 8.0+ (bf16 tensor cores)
        return not ctx.on_cuda or tuple(ctx.capability or (0, 0)) >= (8, 0)

    def values(self, ctx):
        return ["bf16"] if self.bf16_fast(ctx) else ["fp16"]

    def not_tried(self, ctx):
        if not self.bf16_fast(ctx):
            cap = ".".join(map(str, ctx.capability)) if ctx.capability else "unknown"
            return {"bf16": f"this GPU (compute capability {cap}, before 8.0) has no bf16 tensor cores"}
        return {"fp16": "bf16 runs on this GPU's tensor cores as fast, with fp32's exponent range: no GradScaler needed"
                if ctx.on_cuda else "on a CPU bf16 is the 16-bit format with matrix units (AVX512-BF16/AMX); fp16 has "
                "no fast path (pitstop bench PIT301 on an AMD EPYC with AVX512-BF16: a conv training step at batch 1 "
                "14x slower in fp16 than in fp32, 2.0x faster in bf16)"}

    def cannot_run(self, value, ctx):
        if value != "fp16" or ctx.mode != "script":
            return None  # bf16 needs no scaler; the engine (API mode) runs its own GradScaler
        from pitstop.tune.patch import scaler_blocker

        return scaler_blocker(ctx, "fp16 needs a GradScaler around the script's backward and optimizer step")

    def label(self, value):
        return "bf16 autocast" if value == "bf16" else "fp16 autocast + GradScaler"

    def phases(self, value, ctx):
        # the training forwards it wraps and their backwards (fp16: the GradScaler's unscale too)
        return ("forward", "backward") if value == "bf16" else ("forward", "backward", "optimizer")

    def recipe_fields(self, value, ctx):
        return {"precision": "bf16-mixed" if value == "bf16" else "fp16-mixed"}

    def unavailable(self, value, run):
        # the baseline ran: a RuntimeError only under autocast is an operator with no kernel for
        # the dtype here (oneDNN: "could not create a primitive descriptor for the LSTM ...")
        text = f"{run.message}\n{run.traceback or ''}"
        if run.status != "error" or "RuntimeError" not in text:
            return None
        line = next((ln.strip() for ln in reversed(text.splitlines()) if "RuntimeError" in ln), run.message)
        line = line.split("RuntimeError", 1)[1].lstrip(": ")
        return (f"{self.label(value)} is not available for this model on this device: the run raised "
                f"RuntimeError: {line[:200]} (the baseline ran)")

    def hardware_note(self, value, ctx, speed):
        if value != "bf16" or ctx.on_cuda or speed is None:
            return None
        from pitstop.machine import bf16_slowdown_note

        return bf16_slowdown_note(speed.ratio)

    def child_kwargs(self, value, ctx):
        return {"device": "cuda" if ctx.on_cuda else "cpu"}

    def apply_in_child(self, value, device="cpu", **options):
        import torch

        from pitstop.tune.patch import grad_scaler, on_model, to_float, wrap_forward

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[value]

        def wrapper(forward):
            def autocast_forward(*args, **kwargs):
                if not torch.is_grad_enabled():  # evaluation: the snippet leaves it alone
                    return forward(*args, **kwargs)
                with torch.autocast(device_type=device, dtype=dtype):
                    out = forward(*args, **kwargs)
                return to_float(out)
            return autocast_forward

        on_model(lambda model: wrap_forward(model, wrapper), order=self.order)
        if value == "fp16":  # before the script builds its optimizer
            grad_scaler(device)

    def snippet(self, value, ctx):  # exactly what apply_in_child measured: the forward in 16 bits, the loss in fp32
        dev = "cuda" if ctx.on_cuda else "cpu"
        fp16 = value == "fp16"
        lines = [f'scaler = torch.amp.GradScaler("{dev}")  # once, before the training loop'] if fp16 else []
        lines += [f'with torch.autocast(device_type="{dev}", dtype=torch.{"float16" if fp16 else "bfloat16"}):',
                  "    out = model(x)                      # the forward only",
                  "loss = loss_fn(out.float(), y)          # the loss in fp32, as pitstop tune measured it"]
        lines += ["scaler.scale(loss).backward()           # outside autocast (PIT305)",
                  "scaler.unscale_(optimizer)              # only where you clip: before clip_grad_norm_ (PIT303)",
                  "scaler.step(optimizer)                  # skips the update when gradients overflowed",
                  "scaler.update()"] if fp16 else ["loss.backward()                         # outside autocast (PIT305)",
                                                   "optimizer.step()"]
        return "\n".join(lines) + "\n"


# --- doctor probe face ---
from pitstop.doctor.analysis.probe import ESTIMATE_NOTE, Probe, gain_text, probe_gain  # noqa: E402


class PrecisionProbe(Probe, tip="PIT301"):
    """Forward+backward of a copy of the model in fp32 vs under bf16 autocast (fp16 on
    GPUs without bf16), on the last training batch."""

    name = "precision"

    def skip_reason(self, obs):
        if obs.model is None:
            return "no model with parameters ran a training forward"
        if obs.autocast_dtype is not None:
            return "training already runs under autocast"
        if obs.model.param_dtype != "float32":
            return f"the model's parameters are {obs.model.param_dtype}, not float32"
        return None

    def run(self, ctx):
        import torch

        on_cuda = ctx.device == "cuda"
        dtype = torch.bfloat16 if not on_cuda or torch.cuda.is_bf16_supported() else torch.float16
        name = str(dtype).replace("torch.", "")
        from pitstop.machine import bf16_probe_rule, bf16_slowdown_note

        model, batch = ctx.model_copy(), ctx.batch()
        result = ctx.compare(what=ctx.describe(model, batch), baseline="fp32",  # emulated bf16: one slow round decides
                             variants={"fp32": ctx.fwd_bwd(model, batch), name: ctx.fwd_bwd(model, batch, autocast=dtype)},
                             dtype=name, **({} if on_cuda or ctx.cpu is None else bf16_probe_rule(ctx.cpu, "fp32", name)))
        g = result.gain(name)
        if not on_cuda and g is not None:  # a large bf16 slowdown that the CPU's flags explain
            from dataclasses import replace

            result = replace(result, hardware=bf16_slowdown_note(g.ratio, ctx.cpu))
        yield self.name, result


# the trace face (trace.py) and the memory fix face (memory.py) live beside this module
from pitstop.tips.pit301_mixed_precision import memory, trace  # noqa: E402,F401
