"""PIT407 checkpoint-reentrant: pass use_reentrant explicitly (False) to torch.utils.checkpoint."""

from __future__ import annotations

from pitstop.catalog import Tip


class CheckpointReentrant(Tip):
    code = "PIT407"
    slug = "checkpoint-reentrant"
    title = "torch.utils.checkpoint.checkpoint / checkpoint_sequential without use_reentrant="
    faces = "L"
    seeds = ("002", "003")
    truth = (
        "In torch 2.13 (checked), `checkpoint` and `checkpoint_sequential` without `use_reentrant` "
        "do not raise: they emit a UserWarning (\"the use_reentrant parameter should be passed "
        "explicitly ... use_reentrant=False is recommended\") and fall back to "
        "`use_reentrant=True`, the old implementation. The warning text announces an exception "
        "\"starting in PyTorch 2.9\"; that has not happened as of 2.13, so omitting the argument "
        "still silently selects the reentrant variant. Seeds 002 and 003 name "
        "`torch.utils.checkpoint` without the argument."
    )

    what = """
        Flags calls of `torch.utils.checkpoint.checkpoint(…)` and `checkpoint_sequential(…)`
        that do not pass `use_reentrant`. The finding is reported at the call; the safe
        autofix adds `use_reentrant=False`. Passing `use_reentrant=True` explicitly also
        satisfies the rule.
    """
    why = """
        The default you get by omission is the reentrant variant, which has sharp edges.
        When none of a block's tensor inputs requires grad (the first block receives the raw
        batch, or the inputs come from a frozen embedding), its parameters get no gradient,
        with only a warning: checked here, `l2(checkpoint(l1, x, use_reentrant=True))` left
        `l1.weight.grad` at None, and a model made only of such blocks fails in backward with
        "element 0 of tensors does not require grad". It rejects keyword arguments to the
        checkpointed function and recomputes the whole block, while `use_reentrant=False`
        stops recomputing once the saved tensors are rebuilt: in PIT401's setup (with an input
        that requires grad) the reentrant step counted 550 GFLOP against 481 GFLOP.
    """
    example = """
        ```python
        from torch.utils.checkpoint import checkpoint, checkpoint_sequential

        h = checkpoint(block, x)                       # warns, then uses use_reentrant=True
        y = checkpoint_sequential(model.layers, 4, h)  # same
        ```
    """
    use_instead = """
        ```python
        h = checkpoint(block, x, use_reentrant=False)
        y = checkpoint_sequential(model.layers, 4, h, use_reentrant=False)
        ```
    """
    when_not = """
        The argument changes nothing about whether checkpointing pays off (PIT401); it picks
        the implementation and silences the warning. Code that deliberately depends on the
        reentrant variant's behaviour can keep it by writing `use_reentrant=True`.
    """
    references = (
        "PyTorch docs, torch.utils.checkpoint (use_reentrant, differences between the two variants): https://pytorch.org/docs/stable/checkpoint.html",
        "Seed 002 (Gradient checkpointing), seed 003 (torch.utils.checkpoint)",
    )


# --- lint face ---
from pitstop.lint.rule import SAFE, LintRule, nodes

_CALLS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})


class CheckpointReentrantRule(LintRule, tip="PIT407"):
    concern = "deprecation"  # never hidden as one-time: it breaks when torch removes it, however often it runs
    runs = "step"  # paid every step wherever the reported line is
    message = "activation checkpoint without use_reentrant=; PyTorch warns and will change the default: pass use_reentrant=False"
    fix = SAFE

    def visit_Call(self, node):
        if self.ctx.call_name(node) in _CALLS and nodes.kwarg(node, "use_reentrant") is None \
                and not nodes.has_kwargs_splat(node):
            self.report(node, fix=self.ctx.fix(SAFE, "Add use_reentrant=False",
                                               (node, nodes.with_kwarg(node, "use_reentrant", "False"))))
