"""PIT802 accumulation-loss-scale: divide each micro-batch loss by the number of micro-steps."""

from __future__ import annotations

from pitstop.catalog import Tip


class AccumulationLossScale(Tip):
    code = "PIT802"
    slug = "accumulation-loss-scale"
    title = "Gradient accumulation without dividing the loss by the number of micro-steps"
    faces = "L"
    seeds = ("002",)
    truth = (
        "Seed 002's accumulation snippet backpropagates each micro-batch's `loss` undivided; its "
        "`actual_loss = scaled_loss / N_STEPS` divides only the number it logs, not the "
        "gradient. Checked here: with a mean-reduced loss and k = 4 equal micro-batches, the "
        "undivided accumulated gradient was exactly 4x the gradient of the full batch, and "
        "dividing each micro-batch loss by k made them equal. Seed 001's accumulation loop has "
        "the same omission."
    )

    what = """
        Flags a training loop with a `.step()` under an accumulation condition (a `%` test, a
        name about accumulation/sync/steps, or the loop's own counter; a config switch such as
        `if args.use_optimizer:` is not one) whose backward'ed loss is never divided: no
        `loss / k`, no `loss /= k` in the loop, and no division inside the expression passed to
        backward. `accelerator.backward(loss)` / `fabric.backward(loss)` /
        `self.manual_backward(loss)` count as backward calls of `loss`; it is not flagged under
        `with accelerator.accumulate(model):`, through `accelerator.backward` when the file
        gives `Accelerator(gradient_accumulation_steps=...)` (accelerate divides then), nor when
        the gradients are scaled before the step (`scale_grads(model, 1 / num_tokens)`,
        `p.grad /= k`, `p.grad.div_(k)`). It reports at the backward call and offers no fix.
    """
    why = """
        Gradients add up across `backward()` calls, so k micro-batches with a mean-reduced loss
        leave the *sum* of k mean gradients in `.grad`: k times the gradient of the mean over
        the large batch the accumulation stands for. With SGD that is an effective learning
        rate k times too high. Adam and AdamW are nearly invariant to a constant gradient
        scale, but gradient-norm clipping (and L2 weight decay added to the gradient, as in
        SGD or Adam with `weight_decay`) see the k-times larger gradient, so results still
        change.
    """
    example = """
        Seed 002's snippet:
        ```python
        optimizer.zero_grad()
        for accumulated_step_i in range(N_STEPS):
            loss = loss_fn(model(x), y)
            loss.backward()                  # sums N_STEPS full-size gradients
        optimizer.step()
        ```
    """
    use_instead = """
        ```python
        optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum   # mean over the accumulated batch
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        ```
        Log `loss.detach() * accum` (or the undivided loss) to keep the logged value
        comparable with an un-accumulated run.
    """
    when_not = """
        If the learning rate was tuned with the summed gradient, dividing changes the effective
        step size: scale the learning rate by k when you fix it. With `reduction="sum"` the
        right divisor is the number of samples (or tokens) across the k micro-batches, not k;
        the same holds when micro-batches differ in size (variable-length sequences), where
        dividing each mean by k weights samples unequally. A last, shorter group at the end of
        an epoch is slightly under-weighted by a fixed 1/k.
    """
    references = (
        "PyTorch docs, CUDA Automatic Mixed Precision examples — Gradient accumulation (loss / iters_to_accumulate): https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation",
        "PyTorch docs, torch.Tensor.backward (gradients accumulate in the leaves): https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html",
        "Goyal et al., Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, 2017 (learning rate vs. batch size): https://arxiv.org/abs/1706.02677",
        "Seed 002 (Gradient accumulation snippet); seed 001 (7, gradient accumulation) has the same omission",
    )


# --- lint face ---
import re  # noqa: E402

from pitstop.lint.rule import LintRule, cst, nodes  # noqa: E402

_ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})


#: names of a batch size: the divisor of a count of micro-steps derived from a nominal batch
_BATCH = re.compile(r"(?:^|_)(?:bs|batch|batch_size|bsz|micro_batch|mbs)(?:$|_)", re.I)


def _is_grad(expr):
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        expr = expr.value
    return isinstance(expr, cst.Attribute) and expr.attr.value == "grad"


class LossScaleRule(LintRule, tip="PIT802"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    runs = "step"  # paid every step wherever the reported line is
    message = "gradients accumulated over micro-steps but the loss is not divided by their number: the step is k times too large"
    in_tests = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.backwards = []  # (call, site, loss, through accelerator.backward?)
        self.divided = []  # (name, site)
        self.grads_scaled = []  # sites where gradients are scaled before the step
        self.framework_divides = False

    def visit_Call(self, node):
        ctx = self.ctx
        name = nodes.last_name(node.func) or ""
        if "scale_grad" in name or name in ("div_", "mul_") and _is_grad(nodes.receiver(node)):
            self.grads_scaled.append(ctx.site())  # torchtune's scale_grads(model, 1 / num_tokens), p.grad.div_(k)
            return
        if ctx.call_name(node) in _ACCELERATORS and nodes.kwarg(node, "gradient_accumulation_steps") is not None \
                or "GradientAccumulationPlugin" in name:
            self.framework_divides = True  # accelerator.backward divides by its accumulation steps
        loss = ctx.backward_loss(node)
        if loss is None:
            return
        if any(nodes.method(c) == "accumulate" for c in ctx.with_calls()):
            return  # with accelerator.accumulate(model): the framework scales and syncs
        self.backwards.append((node, ctx.site(), loss, ctx.framework_backward(node)))

    def _nominal_batch(self, loop):
        """The step runs every ``k`` micro-steps with ``k`` derived from a nominal batch: ``accumulate =
        max(round(nbs / batch_size), 1)`` with ``nbs`` a constant (64), the count of micro-batches of the
        size the learning rate and weight decay were tuned for; the summed gradient is what that batch gives."""
        for test in loop.step_tests:
            for name in nodes.names_in(test):
                value = loop.scope.lookup(name)
                for div in nodes.binary_ops(value, cst.Divide, cst.FloorDivide):
                    left = loop.scope.lookup(div.left.value) if isinstance(div.left, cst.Name) else div.left
                    if nodes.number_value(left) is not None and _BATCH.search(nodes.last_name(div.right) or ""):
                        return True
        return False

    def _summed(self, recv, scope):
        """The backward'ed loss is a batch's sum: ``reduction="sum"``, or made by a loss class or function (of this
        file or a linted sibling) that returns its value times the batch size (``return loss * bs``)."""
        ctx = self.ctx
        for name in ctx.loss_names(recv):
            value = scope.lookup(name) or ctx.unpacked_from(name)
            call = value if isinstance(value, cst.Call) else None
            if call is None:
                continue
            made = scope.lookup(call.func.value) if isinstance(call.func, cst.Name) else None
            for c in (call, made):
                if isinstance(c, cst.Call) and nodes.string_value((nodes.kwarg(c, "reduction") or cst.Arg(cst.Name("x"))).value) == "sum":
                    return True
            maker = nodes.last_name(made.func) if isinstance(made, cst.Call) else nodes.last_name(call.func)
            if maker and ctx.returns_batch_sum(maker):
                return True
        return False

    def visit_AugAssign(self, node):
        if isinstance(node.operator, (cst.DivideAssign, cst.MultiplyAssign)) and _is_grad(node.target):
            self.grads_scaled.append(self.ctx.site())
        elif isinstance(node.operator, cst.DivideAssign):
            self._divided(node.target)

    def visit_Assign(self, node):
        if nodes.contains_op(node.value, cst.Divide):
            for t in node.targets:
                self._divided(t.target)

    def _divided(self, target):
        name = nodes.dotted(target)
        if name:
            self.divided.append((name, self.ctx.site()))

    def finish(self):
        for node, site, recv, framework in self.backwards:
            loop = site.inner_loop()
            if loop is None or not loop.conditional_step or nodes.contains_op(recv, cst.Divide):
                continue
            if self._nominal_batch(loop) or self._summed(recv, loop.scope):
                continue  # each step is the gradient of a nominal batch's sum, which the hyperparameters fit
            if framework and self.framework_divides or any(loop in s.frames for s in self.grads_scaled):
                continue
            names = self.ctx.loss_names(recv)
            if any(name in names and loop in s.frames for name, s in self.divided):
                continue
            self.report(node)
