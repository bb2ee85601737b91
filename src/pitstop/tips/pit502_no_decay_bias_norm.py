"""PIT502 no-decay-bias-norm: weight decay on projection weights only, not on biases and norms."""

from __future__ import annotations

from pitstop.catalog import Tip


class NoDecayBiasNorm(Tip):
    code = "PIT502"
    slug = "no-decay-bias-norm"
    title = "Weight decay applied to biases and normalization weights"
    faces = "LDH"
    seeds = ("002",)
    helpers = ("param_groups",)
    truth = (
        "Seed 002's `add_weight_decay` is sound (1-D parameters and `.bias` go to a no-decay "
        "group, frozen parameters are skipped); `pitstop.param_groups(model, weight_decay)` "
        "builds the same two groups and also puts every parameter of a normalization layer in "
        "the no-decay group. What the seed does not say: `torch.optim.AdamW` decays by default "
        "(`weight_decay=0.01`), so `AdamW(model.parameters())` decays biases and norm weights "
        "even when no decay was asked for. This is about what gets regularized, not about "
        "speed."
    )

    what = """
        Flags `AdamW(<x>.parameters(), …)` without `weight_decay` (its default is 0.01) and any
        `torch.optim.*` constructor given a non-zero `weight_decay` together with
        `<x>.parameters()` (directly or through a name) rather than parameter groups: a literal,
        a module constant, or an argparse option of the same file whose default is non-zero (the
        message names it); `weight_decay=0.0` and values the file does not pin down are not
        flagged. The optimizer may be named through a variable (`optimizer_class =
        torch.optim.AdamW` ... `optimizer_class(...)`). Files that wrap the model with PEFT
        (`import peft`) are not flagged: the trainable parameters are then the adapters (LoRA
        matrices, prompt embeddings), mostly without biases or norm weights. Reported at the
        call, no fix is offered. At run time the doctor inspects the optimizer's parameter groups and reports
        biases and normalization parameters that receive non-zero weight decay. The helper
        `pitstop.param_groups(model, weight_decay)` builds the two groups.
    """
    why = """
        Weight decay shrinks every parameter it is applied to toward zero at each step. For the
        weights of Linear, convolution and embedding layers that is the intended regularization.
        Biases and the scale/shift of BatchNorm/LayerNorm are a tiny share of the parameters;
        decaying a norm's scale toward 0 shrinks the layer's output instead of regularizing a
        projection. Widely used recipes therefore exempt them: "no bias decay" in He et al.'s Bag
        of Tricks (weights of conv and FC layers only), BERT's optimizer (excludes `LayerNorm` and
        `bias`), nanoGPT (decays only parameters with 2 or more dimensions).
    """
    example = """
        ```python
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        # every bias and every LayerNorm/BatchNorm weight is decayed too
        ```
    """
    use_instead = """
        ```python
        import pitstop

        optimizer = torch.optim.AdamW(pitstop.param_groups(model, weight_decay=0.1), lr=3e-4)
        ```
        `param_groups` returns `[{"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0}]`: weights of Linear/Conv/Embedding layers
        decay; biases, every parameter of a normalization layer and other 1-D parameters do not;
        frozen parameters are left out (PIT503). Full parameter names passed as
        `skip=("pos_embedding",)` also go to the no-decay group.
    """
    when_not = """
        With `weight_decay=0` (the default of SGD and Adam, not of AdamW) there is nothing to
        split. It does not make a step faster. Some published recipes decay everything and were
        tuned that way: switching changes the effective regularization, so compare the
        validation metric before adopting it. Whether embeddings should decay is a recipe choice
        (`param_groups` decays them, like nanoGPT; name them in `skip=` otherwise).
    """
    references = (
        "PyTorch docs, torch.optim — Per-parameter options: https://pytorch.org/docs/stable/optim.html#per-parameter-options",
        "PyTorch docs, torch.optim.AdamW (default weight_decay=0.01): https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
        "Loshchilov & Hutter, Decoupled Weight Decay Regularization, ICLR 2019: https://arxiv.org/abs/1711.05101",
        "He et al., Bag of Tricks for Image Classification with Convolutional Neural Networks (\"No bias decay\"), CVPR 2019: https://arxiv.org/abs/1812.01187",
        "nanoGPT `configure_optimizers` (2-D parameters decay; biases and layernorms don't): https://github.com/karpathy/nanoGPT/blob/master/model.py",
        "Seed 002 (Remove bias weight decay)",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule, cst, nodes


class DecayOnBiasRule(LintRule, tip="PIT502"):
    runs = "step"  # paid every step wherever the reported line is
    message = "weight decay applied to every parameter, biases and norm weights included; pass two parameter groups (pitstop.param_groups)"
    in_tests = False

    def visit_Call(self, node):
        ctx = self.ctx
        q = ctx.optimizer_class(node)
        if q is None:
            return
        params = nodes.arg(node, "params", 0)
        if params is None or not _all_parameters(ctx, params.value):
            return
        if any(m == "peft" or m.startswith("peft.") for m in ctx.info.imported_modules):
            return  # a PEFT model: the trainable parameters are adapters (LoRA matrices, prompts), not the base's
        wd = nodes.kwarg(node, "weight_decay")
        cls = q.rsplit(".", 1)[1]
        if wd is None:
            if any(a.star == "**" for a in node.args):
                return  # ``AdamW(params, **opt_args)``: the mapping may set weight_decay (and the file groups params)
            if q.endswith(".AdamW"):
                self.report(node, "AdamW decays every parameter (default weight_decay=0.01), biases and norm weights "
                                  "included; pass two parameter groups (pitstop.param_groups)")
            return
        value = ctx.constant(wd.value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value == 0:
            return  # 0, or a value the file does not pin down: no claim about it
        shown = ctx.source_of(wd.value)
        option = ctx.argparse_default(wd.value)
        where = f"weight_decay={shown}" + (f" ({option.option} defaults to {value:g})" if option is not None else "")
        self.report(node, f"{cls} with {where} decays every parameter, biases and norm weights included; pass two "
                          "parameter groups (pitstop.param_groups)")


def _all_parameters(ctx, expr) -> bool:
    """``model.parameters()``, or a name bound to it in this scope chain."""
    if nodes.method(expr) == "parameters":
        return True
    bound = ctx.value_of(expr) if isinstance(expr, cst.Name) else None
    return bound is not None and nodes.method(bound) == "parameters"


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class DecayOnBiasNormCheck(Check, tip="PIT502"):
    looks_at = "weight decay on 1-D parameters (biases, norm weights) in the optimizer's groups"

    def check(self, obs, th):
        for o in obs.optimizers:
            if o.decay_1d_params:
                yield self.finding(
                    th, title="Weight decay on biases and normalization weights",
                    evidence=f"{o.cls} applies weight_decay={o.weight_decay:g} to {o.decay_1d_params} "
                             f"1-D parameters ({o.decay_1d_numel:,} elements: biases, norm weights).",
                    fix="optimizer = torch.optim.AdamW(pitstop.param_groups(model, weight_decay=...))",
                    kind="correctness", severity="low")
