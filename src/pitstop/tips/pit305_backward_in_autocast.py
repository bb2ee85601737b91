"""PIT305 backward-in-autocast: autocast the forward pass and the loss, not the backward call."""

from __future__ import annotations

from pitstop.catalog import Tip


class BackwardInAutocast(Tip):
    code = "PIT305"
    slug = "backward-in-autocast"
    title = ".backward() called inside the autocast block"
    faces = "L"
    seeds = ("001",)
    truth = (
        "Seed 001's advice (autocast the forward, not the backward) is right, but its reason is "
        "not: the backward pass is not run \"without mixed precision\". Backward ops run in the "
        "dtypes autocast chose for the corresponding forward ops, inside or outside the block "
        "(seed 003's comment says so correctly). Checked here: an MLP under bf16 CPU autocast "
        "got bit-identical gradients with `backward()` inside and outside the block. The "
        "PyTorch docs state that backward passes under autocast are not recommended."
    )

    what = """
        Flags a `.backward()` call lexically inside a `with` block of any autocast:
        `torch.autocast`, `torch.amp.autocast`, `torch.cuda.amp.autocast`, or a bare imported
        `autocast`. The finding is reported at the backward call; there is no autofix (the
        statement has to move out of the block, after the loss).
    """
    why = """
        Autocast decides dtypes when forward ops run; autograd records them, and each backward
        op runs in the dtype of its forward op. Wrapping `backward()` in autocast therefore
        buys nothing, and it is outside the documented usage. Whether code that runs during
        the backward (custom `autograd.Function.backward`, hooks, the graph built by
        `create_graph=True` for gradient penalties) sees autocast is not something to rely
        on: autocast state is thread-local and the autograd engine may run backward work on
        its own device threads. Keep the region to what it is for: the forward pass and the
        loss.
    """
    example = """
        ```python
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            output = model(x)
            loss = criterion(output, y)
            loss.backward()          # inside the autocast block
        optimizer.step()
        ```
    """
    use_instead = """
        ```python
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            output = model(x)
            loss = criterion(output, y)
        loss.backward()              # still runs in the forward's dtypes
        optimizer.step()
        ```
    """
    when_not = """
        Do not expect a speed-up or a different result from moving it: for a plain
        forward/loss/backward the gradients were identical here. The gain is staying inside
        the documented contract, which matters once gradient penalties, custom autograd
        Functions or hooks are involved.
    """
    references = (
        "PyTorch docs, torch.autocast (\"Backward passes under autocast are not recommended\"): https://pytorch.org/docs/stable/amp.html",
        "PyTorch docs, Automatic Mixed Precision examples (gradient penalty pattern): https://pytorch.org/docs/stable/notes/amp_examples.html",
        "Seed 001 (mixed precision for the forward pass, but not for the backward pass); seed 003's comment on backward dtypes",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes


class BackwardInAutocastRule(LintRule, tip="PIT305"):
    message = ".backward() inside the autocast block; autocast the forward and the loss only"
    in_tests = False  # unit tests of autocast/backward interplay do it on purpose

    def visit_Call(self, node):
        if nodes.method(node) != "backward":
            return
        ctx = self.ctx
        if any(ctx.is_autocast(c) for c in ctx.with_calls()):
            self.report(node)
