"""PIT801 accumulation-zero-grad: zeroing every micro-step silently turns accumulation off."""

from __future__ import annotations

from pitstop.catalog import Tip


class AccumulationZeroGrad(Tip):
    code = "PIT801"
    slug = "accumulation-zero-grad"
    title = "zero_grad() every micro-step while step() is conditional: accumulation silently does nothing"
    faces = "L"
    seeds = ("004",)
    truth = (
        "Seed 004's own gradient-accumulation example (section 4.2) has this bug: it calls "
        "`optimizer.zero_grad()` at the top of every iteration and `optimizer.step()` only every "
        "`grad_accumulation_steps`, so each step uses the gradient of the last micro-batch "
        "alone. Checked here: after such a loop the gradient was exactly the last micro-batch's "
        "gradient, not the accumulated one. Its tail condition `(i + 1) == total_steps` also "
        "compares the per-epoch index with the step count over all epochs, so it can only fire "
        "in a one-epoch run."
    )

    what = """
        Flags a training loop that calls `zero_grad()` unconditionally while its `.step()` runs
        under a condition (the accumulation pattern). It reports at the `zero_grad` call and
        offers no fix: where the zeroing belongs depends on the loop.
    """
    why = """
        `backward()` adds into `.grad`; gradient accumulation relies on exactly that. Zeroing
        on every micro-step throws away the k-1 gradients accumulated so far, so every k
        micro-batches the optimizer steps with the gradient of one micro-batch. Training runs
        with the small batch, takes k times fewer steps, and still pays for k forward and
        backward passes per step. Nothing raises and the loss still goes down, only more
        slowly, which is why the bug survives.
    """
    example = """
        Seed 004's loop, shortened:
        ```python
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()            # wipes what the previous micro-steps added
            loss = loss_fn(model(x), y)
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
        ```
    """
    use_instead = """
        ```python
        optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum   # PIT802
            loss.backward()                       # adds into .grad
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()             # zero only after stepping
        ```
        Under DDP, also skip the all-reduce on the non-final micro-steps (PIT702).
    """
    when_not = """
        Not every conditional step is accumulation: a loop that skips the update on purpose
        (a non-finite loss, a warm-up phase, alternating generator/discriminator updates) may
        zero deliberately; silence those with `# noqa: PIT801`. This is a correctness fix, not
        a speed-up: the time per step stays the same, but each step finally uses the large
        batch you are paying for.
    """
    references = (
        "PyTorch docs, torch.Tensor.backward (\"This function accumulates gradients in the leaves\"): https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html",
        "PyTorch docs, torch.optim.Optimizer.zero_grad: https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
        "PyTorch docs, CUDA Automatic Mixed Precision examples — Gradient accumulation: https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation",
        "Seed 004 (4.2 Gradient Accumulation Example, which contains the bug)",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes


class ZeroGradEveryMicroStepRule(LintRule, tip="PIT801"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    runs = "step"  # paid every step wherever the reported line is
    message = "zero_grad() every micro-step while step() is conditional: the accumulated gradients are wiped before each step"
    in_tests = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.calls = []

    def visit_Call(self, node):
        if nodes.method(node) == "zero_grad":
            self.calls.append((node, self.ctx.site()))

    def finish(self):
        for node, site in self.calls:
            loop = site.inner_loop()
            if loop is not None and loop.conditional_step and not site.conditional(loop):
                self.report(node)
