"""PIT606 fold-linear-bn: fold Linear+Linear and Conv+BatchNorm into one layer for inference."""

from __future__ import annotations

from pitstop.tips._base import Tip


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
        reported at the second Linear; no fix is offered (a missing activation is a modelling
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


# --- doctor face ---
from pitstop.doctor.check import Check  # noqa: E402


class AdjacentLinearCheck(Check, tip="PIT606"):
    looks_at = "Linear layers feeding another Linear with nothing between (data flow of one training forward)"

    def check(self, obs, th):
        pairs = [p for m in obs.models for p in m.get("linear_linear", [])]
        if pairs:
            listing = ", ".join(f"{p['pair'][0]} -> {p['pair'][1]} ({p['saved_macs']:,} of {p['macs']:,} "
                                "multiply-adds per row)" for p in pairs[:4])
            yield self.finding(
                th, title="Two Linear layers with no non-linearity between them",
                evidence=f"{listing}: the pair is one linear map; folded, it costs fewer multiply-adds.",
                fix="add the missing activation, or fold the pair (pitstop.fuse_for_inference) for inference",
                severity="low")
