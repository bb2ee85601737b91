"""PIT303 clip-without-unscale: unscale the gradients before clipping them under a GradScaler."""

from __future__ import annotations

from pitstop.catalog import Tip


class ClipWithoutUnscale(Tip):
    code = "PIT303"
    slug = "clip-without-unscale"
    title = "Gradient clipping after scaler.scale(loss).backward() without scaler.unscale_() first"
    faces = "LE"
    seeds = ("003",)
    truth = (
        "Seed 003 is right, and the bug is silent: without `scaler.unscale_(optimizer)` the clip "
        "compares `max_norm` with gradients multiplied by the loss scale. Measured here on a "
        "`Linear(64, 1)` with `torch.amp.GradScaler(\"cpu\")` (initial scale 65536), SGD lr 0.1 "
        "and `clip_grad_norm_(max_norm=1.0)`: with `unscale_` the clip saw the true norm 4.15 and "
        "the weight moved by 0.1; without it the clip saw 2.7e5 and the weight moved by 1.5e-6, "
        "65536x less, with no error and no warning."
    )

    what = """
        Flags, within one function, `<scaler>.scale(…).backward()` followed by
        `torch.nn.utils.clip_grad_norm_` or `clip_grad_value_` with no `<scaler>.unscale_(…)`
        call between them. The finding is reported at the clip call; there is no autofix
        (`unscale_` takes the optimizer that owns the clipped parameters).
    """
    why = """
        `GradScaler` multiplies the loss by its scale factor (65536 at the start, then halved
        on overflow and doubled after a run of clean steps), so every `.grad` is multiplied by
        the same factor until `scaler.step` divides it out. `max_norm` and `clip_value` are in
        true-gradient units: against scaled gradients the norm almost always exceeds
        `max_norm`, every step gets clipped to `max_norm / scale` in true units, and the
        effective learning rate shrinks by the scale factor and jumps whenever the scale
        changes. `scaler.unscale_(optimizer)` divides the gradients in place first; the
        following `scaler.step` knows they are already unscaled and does not divide again,
        and it still skips the step if `unscale_` found inf/NaN.
    """
    example = """
        ```python
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # scaled grads!
        scaler.step(optimizer)
        scaler.update()
        ```
    """
    use_instead = """
        ```python
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)                      # once per optimizer per step
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)                          # does not unscale twice
        scaler.update()
        ```
        With gradient accumulation, call `unscale_` only after the last micro-batch, right
        before clipping and stepping.
    """
    when_not = """
        Nothing to fix without a GradScaler: bf16 autocast and fp32 training have unscaled
        gradients already, and a `GradScaler(enabled=False)` scales by nothing. Clipping
        itself is a choice of the training recipe, not a speed-up; this tip only makes it
        clip what you asked for.
    """
    references = (
        "PyTorch docs, Automatic Mixed Precision examples — Working with Unscaled Gradients (gradient clipping): https://pytorch.org/docs/stable/notes/amp_examples.html",
        "PyTorch docs, torch.amp.GradScaler.unscale_: https://pytorch.org/docs/stable/amp.html",
        "PyTorch docs, torch.nn.utils.clip_grad_norm_: https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
        "Seed 003 (Gradient Clipping: unscale_ before clip_grad_norm_)",
    )
    engine = "With Recipe.clip_norm or Recipe.clip_value under fp16-mixed, make_step calls scaler.unscale_(optimizer) once per optimizer step, after the last micro-batch and before clipping."


# --- lint face ---
from pitstop.lint.frames import Cond
from pitstop.lint.rule import LintRule, nodes

_CLIPS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                    "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"})


class ClipWithoutUnscaleRule(LintRule, tip="PIT303"):
    message = "gradients clipped while still scaled by the GradScaler; call scaler.unscale_(optimizer) before clipping"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.scaled = {}  # function node -> {scaler: if/else blocks around its scaled backward}

    def visit_Call(self, node):
        ctx = self.ctx
        name = nodes.method(node)
        fn = ctx.current_function()
        if name == "backward":
            inner = nodes.receiver(node)
            if nodes.method(inner) == "scale":
                key = nodes.dotted(nodes.receiver(inner))
                if key:
                    conds = tuple(f for f in ctx.function_frames() if isinstance(f, Cond))
                    self.scaled.setdefault(fn, {})[key] = conds
        elif name == "unscale_":
            self.scaled.get(fn, {}).pop(nodes.dotted(nodes.receiver(node)), None)
        elif self.scaled.get(fn) and ctx.call_name(node) in _CLIPS:
            here = ctx.function_frames()
            # only where the scaled backward ran: its if/else branch (or one nested in it), not the other branch
            live = sorted(k for k, conds in self.scaled[fn].items() if all(any(c is f for f in here) for c in conds))
            if live:
                scaler = live[0]
                self.report(node, f"gradients clipped while still scaled by `{scaler}`; "
                                  f"call {scaler}.unscale_(optimizer) before clipping")
