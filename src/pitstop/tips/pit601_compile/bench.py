"""PIT601's bench face: a TinyGPT training step, eager against torch.compile, compile time apart."""

from __future__ import annotations

from pitstop.bench.base import Benchmark, Claim, Outcome

__all__ = ["CompileBench"]


class CompileBench(Benchmark, tip="PIT601"):
    title = "TinyGPT training step (forward + backward): eager vs torch.compile, compile time apart"
    compiles = True
    claim = Claim(
        seed="002",
        text="torch.compile() ... compiles [the model] into low-level compute kernels in a manner that is "
             "optimal for the underlying training accelerator, using techniques such as kernel fusion",
        baseline="eager step",
        candidate="compiled step",
        ratio_of="median time of a training step (forward + loss + backward) eager / compiled",
        scope="any",  # "the underlying training accelerator": whatever device trains; Inductor compiles for CPUs too
    )

    def run(self, ctx):
        import torch
        from torch.nn import functional as F

        from pitstop.examples.models import make_gpt

        torch.manual_seed(0)
        if ctx.cuda:  # CPU size on an H100: 0.95x (launch-bound); under bf16 the fused glue is a real share
            batch, n_layer, seq, d, heads = ctx.size(tiny=(2, 1, 16, 64, 2), quick=(8, 2, 256, 512, 8),
                                                     full=(16, 2, 512, 512, 8))
            half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            precision = ("bf16" if half is torch.bfloat16 else "fp16") + " autocast (eager and compiled)"
        else:
            (batch, n_layer), seq, d, heads, half, precision = ctx.size(tiny=(2, 1), quick=(4, 2), full=(16, 2)), \
                64, 128, 4, None, "fp32"
        model = make_gpt(naive=False, n_layer=n_layer, n_embd=d, n_head=heads, block_size=seq, dropout=0.0)
        model, idx = model.to(ctx.device), torch.randint(0, 1024, (batch, seq + 1), device=ctx.device)
        x, y = idx[:, :-1], idx[:, 1:]

        def step(m):
            model.zero_grad(set_to_none=True)
            with torch.autocast(ctx.device, dtype=half or torch.bfloat16, enabled=half is not None):
                loss = F.cross_entropy(m(x).flatten(0, 1).float(), y.flatten())
            loss.backward()

        compiled, compile_time = ctx.compile(model, step)
        measured = ctx.time({"eager step": lambda: step(model), "compiled step": lambda: step(compiled)})
        eager_s, compiled_s = (m.summary.median for m in measured)
        notes = []
        if compiled_s < eager_s:
            steps = compile_time.samples[0] / (eager_s - compiled_s)
            notes.append(f"At this gain the compile time is paid back after about {steps:,.0f} steps.")
        else:
            notes.append("No speed-up here: the compile time is never paid back on this model and machine.")
        notes.append("Matmuls stay library calls under compile; fusion only speeds up the pointwise glue "
                     "(LayerNorm, GELU, residual adds), so small or matmul-bound models gain little.")
        return Outcome(f"the bundled TinyGPT ({n_layer} layers, d={d}, {heads} heads, vocab 1024, "
                       f"{sum(p.numel() for p in model.parameters()):,} params), "
                       f"batch {batch} x {seq} tokens, {precision} on {ctx.device}; step = forward + cross-entropy + "
                       f"backward, no optimizer; torch.compile default mode (Inductor)",
                       [*measured, compile_time], notes=notes)
