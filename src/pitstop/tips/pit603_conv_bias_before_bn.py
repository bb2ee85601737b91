"""PIT603 conv-bias-before-bn: a convolution bias right before BatchNorm is cancelled; drop it."""

from __future__ import annotations

from pitstop.tips._base import Tip


class ConvBiasBeforeBn(Tip):
    code = "PIT603"
    slug = "conv-bias-before-bn"
    title = "Conv(bias=True) directly followed by BatchNorm: the bias is cancelled"
    faces = "LD"
    seeds = ("003",)
    truth = (
        "Seed 003 is right, and the lint offers `bias=False` as a fix in `nn.Sequential` "
        "literals and modules, marked unsafe because the state-dict loses the `.bias` keys. The "
        "speed gain is small: a training step of 3x (Conv2d(64, 64, 3)+BatchNorm2d+ReLU), input "
        "16x64x32x32, measured 91.4 ms with the biases and 90.3 ms without (about 1%, within "
        "noise; one thread, CPU time, 2-core Xeon). The biases are dead weight: their gradient "
        "measured ~4e-9 against ~8e-4 for the conv weights."
    )

    what = """
        Flags, in an `nn.Sequential(...)` literal, an `nn.ConvNd(...)` without `bias=False`
        immediately followed by `nn.BatchNormNd(...)`; and in a Module,
        `self.<bn>(self.<conv>(…))` where `__init__` binds those names to a ConvNd (bias not
        False) and a BatchNormNd.
        Reported at the conv constructor, with an unsafe fix `bias=False` (unsafe because the
        state-dict keys change, so existing checkpoints no longer load strictly). At run time the
        doctor looks for convolutions with a bias whose output goes straight into a BatchNorm.
    """
    why = """
        In training mode BatchNorm subtracts each channel's batch mean. A conv bias adds the same
        constant to every value of its channel, so it moves the mean by exactly that constant and
        is subtracted right back: the output does not depend on it, its gradient is zero, and
        BatchNorm's own shift (β) plays its role. It still costs an add over the whole conv output
        in forward, a reduction in backward, and a parameter with optimizer state per channel.
    """
    example = """
        ```python
        block = nn.Sequential(
            nn.Conv2d(64, 128, 3, padding=1),   # bias=True by default
            nn.BatchNorm2d(128),
            nn.ReLU(),
        )
        ```
    """
    use_instead = """
        ```python
        block = nn.Sequential(
            nn.Conv2d(64, 128, 3, padding=1, bias=False),
            nn.BatchNorm2d(128),
            nn.ReLU(),
        )
        ```
        torchvision's models are already built this way. To reuse a checkpoint trained with the
        biases, do not just drop them: BatchNorm's `running_mean` was collected with the bias
        included, so subtract each conv bias from the following `running_mean`, then load.
    """
    when_not = """
        Only a normalization that subtracts a per-channel mean cancels the bias: BatchNorm (and
        InstanceNorm). GroupNorm and LayerNorm average over several channels and cancel only the
        mean of their biases; an activation in between (Conv -> ReLU -> BN) cancels nothing. The
        speed gain is small (about 1% measured here); the change is worth making in new models,
        less so in models whose pretrained checkpoints carry the biases.
    """
    references = (
        "PyTorch Performance Tuning Guide — Disable bias for convolutions directly followed by a batch norm: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Ioffe & Szegedy, Batch Normalization, ICML 2015 (section 3.2: the bias \"can be ignored\"): https://arxiv.org/abs/1502.03167",
        "Seed 003 (no bias in a convolution before batch normalization)",
    )


# --- doctor face ---
from pitstop.doctor.check import Check  # noqa: E402


class ConvBiasBeforeBNCheck(Check, tip="PIT603"):
    looks_at = "convolutions with a bias whose output goes straight into BatchNorm"

    def check(self, obs, th):
        pairs = [p for m in obs.models for p in m.get("conv_bias_bn", [])]
        if pairs:
            listing = ", ".join(f"{a} -> {b}" for a, b in pairs[:6])
            yield self.finding(
                th, title="Convolution bias right before BatchNorm is wasted",
                evidence=f"{len(pairs)} Conv->BatchNorm pairs with a conv bias ({listing}): BatchNorm subtracts "
                         "the batch mean, which cancels the bias; its parameters, gradients and updates are wasted.",
                fix="nn.Conv2d(..., bias=False) before BatchNorm", severity="low")
