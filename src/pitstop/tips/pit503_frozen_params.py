"""PIT503 frozen-params: freeze layers, and keep frozen parameters out of the optimizer."""

from __future__ import annotations

from pitstop.catalog import Tip


class FrozenParams(Tip):
    code = "PIT503"
    slug = "frozen-params"
    title = "Frozen parameters handed to the optimizer, or layers that could be frozen"
    faces = "DH"
    seeds = ("002",)
    helpers = ("freeze", "unfreeze")
    truth = (
        "Seed 002's recipe is right: set `requires_grad=False`, then build the optimizer from "
        "the trainable parameters only. What it leaves unsaid: the optimizer skips parameters "
        "whose `.grad` is `None`, so a frozen parameter in the optimizer costs little until it "
        "carries a stale `.grad` (frozen after training started, with gradients zeroed by "
        "`set_to_none=False`). Then momentum and weight decay keep moving the \"frozen\" weight: "
        "here an SGD weight (momentum 0.9) moved by up to 0.15 in the step after it was frozen. "
        "The speed comes from freezing itself: with the first 6 of 8 Linear(1024, 1024)+ReLU "
        "blocks frozen, a training step (batch 256, fused AdamW) took 47 ms instead of 109 ms "
        "(2.3x; one thread, CPU time, 2-core Xeon)."
    )

    what = """
        At run time the doctor flags optimizers whose parameter groups hold parameters with
        `requires_grad=False`. The helpers `pitstop.freeze(*modules)` and
        `pitstop.unfreeze(*modules)` switch `requires_grad` for every parameter of the given
        modules, and `pitstop.param_groups` (PIT502) leaves frozen parameters out.
    """
    why = """
        Autograd computes no weight gradient for a frozen layer, and no gradient at all below the
        last trainable layer, so the backward pass shrinks (2.3x faster step above, where backward
        went from 15 matmuls to 3). An optimizer that still holds the frozen parameters gains
        nothing from them: at best it loops over them and skips them; at worst, if they still
        have a `.grad` tensor, it keeps applying momentum and weight decay to weights that were
        meant to stay fixed.
    """
    example = """
        ```python
        for p in model.backbone.parameters():
            p.requires_grad = False
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        ```
    """
    use_instead = """
        ```python
        import pitstop

        pitstop.freeze(model.backbone)
        optimizer = torch.optim.SGD(
            pitstop.param_groups(model, weight_decay=1e-4),  # trainable parameters only
            lr=0.1, momentum=0.9,
        )
        ```
        Without decay groups: `torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
        ...)`. To unfreeze later (gradual unfreezing), call `pitstop.unfreeze(model.backbone)` and
        hand the parameters to the optimizer with `optimizer.add_param_group(...)`.
    """
    when_not = """
        Freezing changes what is trained: it is a modelling decision, not a free speed-up.
        Frozen BatchNorm layers still update their running statistics in `train()` mode; call
        `.eval()` on them if those must stay fixed. Layers frozen near the output save only their
        weight gradients, since backward must still pass through them to reach trainable layers
        below. If the parameters were frozen before the first step and gradients are zeroed with
        the default `set_to_none=True`, keeping them in the optimizer costs only a loop over them.
    """
    references = (
        "PyTorch docs, Autograd mechanics — Locally disabling gradient computation, setting requires_grad: https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
        "PyTorch tutorial, Transfer Learning for Computer Vision (ConvNet as fixed feature extractor): https://pytorch.org/tutorials/beginner/transfer_learning_tutorial.html",
        "PyTorch docs, torch.optim.Optimizer.add_param_group: https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.add_param_group.html",
        "Seed 002 (Freeze layers)",
    )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class FrozenParamsCheck(Check, tip="PIT503"):
    looks_at = "parameters with requires_grad=False held by an optimizer"

    def check(self, obs, th):
        for o in obs.optimizers:
            if o.frozen_params:
                yield self.finding(
                    th, title="Frozen parameters handed to the optimizer",
                    evidence=f"{o.cls} holds {o.frozen_params} parameters ({o.frozen_numel:,} elements) "
                             "with requires_grad=False: it visits them every step for nothing, and they start "
                             "training silently if unfrozen later.",
                    fix="torch.optim.X(p for p in model.parameters() if p.requires_grad)",
                    kind="correctness", severity="low")
