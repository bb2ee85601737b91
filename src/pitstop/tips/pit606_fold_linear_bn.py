"""PIT606 fold-linear-bn: fold Linear+Linear and Conv+BatchNorm into one layer for inference."""

from __future__ import annotations

from pitstop.catalog import Tip


class FoldLinearBn(Tip):
    code = "PIT606"
    slug = "fold-linear-bn"
    title = "Consecutive Linear layers, or Conv+BatchNorm, that fold into one layer at inference"
    faces = "LDHB"
    seeds = ("004",)
    helpers = ("fuse_for_inference",)
    truth = (
        "Seed 004's `FusedLinear` fuses nothing: its forward still runs two matmuls (`x @ w1 + "
        "b1`, then `@ w2 + b2`), and folding weights is algebra, not the kernel fusion of "
        "PIT601/PIT607. What is true: two Linear layers with no non-linearity between them are "
        "one affine map, z = W2 W1 x + (W2 b1 + b2), so for inference they fold into a single "
        "Linear with W = W2 W1 computed once: one matmul instead of two. A Conv followed by "
        "BatchNorm in eval mode folds the same way (the running statistics become a per-channel "
        "scale and shift of the conv weights). Measured with `pitstop.fuse_for_inference` (one "
        "thread, CPU time, 2-core Xeon): Linear(512, 2048)->Linear(2048, "
        "512)->ReLU->Linear(512, 10), batch 256, 9.09 ms -> 1.33 ms (6.8x), max abs error "
        "3.6e-7; 3x Conv3x3+BN+ReLU (32/64/64 channels), input 16x3x64x64, 97.4 ms -> 77.9 ms "
        "(1.25x), max abs error 1.9e-8."
    )

    what = """
        Flags, in an `nn.Sequential(...)` literal, two `nn.Linear(...)` directly adjacent,
        reported at the second Linear, except in unit tests and deliberate stand-in models
        (classes/functions named dummy/boring/toy/mock/fake); no fix is offered (a missing activation is a modelling
        bug to fix by hand, a deliberate pair is folded for inference). At run time the doctor
        follows the data flow of one training forward for Linear->Linear pairs with nothing
        between them (Conv->BatchNorm folding only matters for inference). The helper
        `pitstop.fuse_for_inference(model)` returns a folded eval-mode copy.
    """
    why = """
        Each layer reads its input from memory, runs a matmul or convolution and writes its
        output; BatchNorm in eval mode is then one more pass that only scales and shifts each
        channel by constants. Folding precomputes those constants into the preceding layer's
        weights once, so inference runs one layer where it ran two: fewer passes over memory and,
        for a wide Linear pair, far fewer FLOPs (512->2048->512 folds to 512->512: 8x fewer).
    """
    example = """
        ```python
        head = nn.Sequential(
            nn.Linear(512, 2048),
            nn.Linear(2048, 512),   # no activation in between: one affine map in two matmuls
            nn.ReLU(),
            nn.Linear(512, 10),
        )
        ```
    """
    use_instead = """
        If the activation was forgotten, add it (`nn.Linear(512, 2048), nn.GELU(), ...`).
        Otherwise fold for inference:
        ```python
        import pitstop

        fast = pitstop.fuse_for_inference(model)   # eval-mode copy; model is untouched
        print(fast.fused_pairs)                    # what was folded
        ```
        It folds Conv+BatchNorm and Linear+Linear pairs on a deep copy and checks the copy
        against the original on an input (`example_input=`, or a random one), raising
        `FusionMismatchError` if they differ. For Linear+BatchNorm1d, PyTorch has
        `torch.nn.utils.fuse_linear_bn_eval`.
    """
    when_not = """
        Only for inference: in training BatchNorm normalizes with batch statistics and the two
        Linears' weights are learned separately. A bottleneck pair gets slower when folded:
        Linear(1024, 64)->Linear(64, 1024) does 2x1024x64 multiply-adds per row, the folded
        1024x1024 matrix 8x more (measured 0.84 ms -> 3.63 ms, batch 256); keep pairs whose hidden
        width is below in*out/(in+out), i.e. deliberate low-rank factorizations, as they are (check
        `fused_pairs`). In a compute-bound conv net the gain of folding BN is modest (1.25x above).
    """
    references = (
        "PyTorch docs, torch.nn.utils.fuse_conv_bn_eval: https://pytorch.org/docs/stable/generated/torch.nn.utils.fuse_conv_bn_eval.html",
        "PyTorch docs, torch.nn.utils.fuse_linear_bn_eval: https://pytorch.org/docs/stable/generated/torch.nn.utils.fuse_linear_bn_eval.html",
        "PyTorch tutorial, (beta) Building a Convolution/Batch Norm fuser in FX: https://pytorch.org/tutorials/intermediate/fx_conv_bn_fuser.html",
        "Seed 004 (3.1 Tensor Fusion and Kernel Fusion, 4.1 Tensor Fusion Example)",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule


class AdjacentLinearRule(LintRule, tip="PIT606"):
    runs = "step"  # paid every step wherever the reported line is
    message = "two Linear layers with nothing between them compose to one linear map; add a non-linearity or fold them"
    in_tests = False
    dummy_models = False

    def visit_Call(self, node):
        ctx = self.ctx
        if ctx.call_name(node) != "torch.nn.Sequential":
            return
        for a, b in zip(node.args, node.args[1:]):
            if a.star or b.star or a.keyword or b.keyword:
                continue
            if ctx.call_name(a.value) == "torch.nn.Linear" and ctx.call_name(b.value) == "torch.nn.Linear":
                self.report(b.value)


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402


class FoldBench(Benchmark, tip="PIT606"):
    title = "Inference with adjacent layers folded by pitstop.fuse_for_inference: Linear+Linear, Conv+BN"
    claim = Claim(
        seed="004",
        text="Tensor fusion combines multiple small tensor operations into larger ones, reducing overhead and "
             "increasing parallelism. This leads to faster computation times (the FusedLinear example)",
        baseline="Linear pair, unfolded",
        candidate="Linear pair, folded",
        ratio_of="median inference time unfolded / folded (Linear(512, 2048) -> Linear(2048, 512) head)",
        scope="any",  # "faster computation times" for a device-independent example (GPU use is a separate clause)
    )

    def run(self, ctx):
        import torch
        from torch import nn

        from pitstop.helpers.fuse import fuse_for_inference
        from pitstop.helpers.precision import full_fp32

        batch, img = ctx.size(tiny=(8, 16), quick=(64, 32), full=(256, 64))
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(512, 2048), nn.Linear(2048, 512), nn.ReLU(), nn.Linear(512, 10))
        layers = []
        for c_in, c_out in ((3, 32), (32, 64), (64, 64)):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]
        convnet = nn.Sequential(*layers)
        with torch.no_grad():  # non-trivial running statistics, as after training
            for mod in convnet:
                if isinstance(mod, nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 2.0)
        head, convnet = head.to(ctx.device).eval(), convnet.to(ctx.device).eval()
        x = torch.randn(batch, 512, device=ctx.device)
        xc = torch.randn(max(batch // 16, 1), 3, img, img, device=ctx.device)
        fused_head = fuse_for_inference(head, x)       # checked against the original on x
        fused_conv = fuse_for_inference(convnet, xc)

        def infer(model, inp):
            def call():
                with torch.inference_mode():
                    return model(inp)
            return call

        measured = ctx.time({
            "Linear pair, unfolded": infer(head, x), "Linear pair, folded": infer(fused_head, x),
            "Conv+BN, unfolded": infer(convnet, xc), "Conv+BN, folded": infer(fused_conv, xc),
        })
        with torch.inference_mode(), full_fp32(x.device.type):  # the algebra's error, not TF32's rounding
            err_head = (head(x) - fused_head(x)).abs().max().item()
            err_conv = (convnet(xc) - fused_conv(xc)).abs().max().item()
        return Outcome(
            workload=f"Linear(512, 2048)->Linear(2048, 512)->ReLU->Linear(512, 10), batch {batch}; and 3 x "
                     f"(Conv3x3 + BatchNorm2d + ReLU), 3->32->64->64 channels, input {xc.shape[0]}x3x{img}x{img}; "
                     f"fp32 eval on {ctx.device}",
            measurements=measured,
            checks={f"folded outputs match (max abs error: Linear pair {err_head:.1e}, Conv+BN {err_conv:.1e})":
                    err_head < 1e-3 and err_conv < 1e-3,
                    "both pairs were folded": len(fused_head.fused_pairs) == 1 and len(fused_conv.fused_pairs) == 3},
            comparisons=[Comparison("Conv+BN, unfolded", "Conv+BN, folded", "Conv+BN unfolded / folded")],
            notes=["Folding is algebra done once before inference, not kernel fusion: the Linear pair becomes one "
                   "512x512 matmul (8x fewer FLOPs), BatchNorm disappears into the conv weights.",
                   "Timed in the device's default fp32 math (TF32 convolutions on Ampere+ GPUs); the outputs are "
                   "compared in full fp32 (TF32 off), where a correct fold agrees to rounding."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class AdjacentLinearCheck(Check, tip="PIT606"):
    looks_at = "Linear layers feeding another Linear with nothing between (data flow of one training forward)"

    def check(self, obs, th):
        pairs = [p for m in obs.models for p in m.linear_linear]
        if pairs:
            listing = ", ".join(f"{p.pair[0]} -> {p.pair[1]} ({p.saved_macs:,} of {p.macs:,} "
                                "multiply-adds per row)" for p in pairs[:4])
            yield self.finding(
                th, title="Two Linear layers with no non-linearity between them",
                evidence=f"{listing}: the pair is one linear map; folded, it costs fewer multiply-adds.",
                fix="add the missing activation, or fold the pair (pitstop.fuse_for_inference) for inference",
                severity="low")
