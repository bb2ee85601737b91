"""PIT804 alias-not-copy: `b = a` shares the tensor; an in-place op on b changes a too."""

from __future__ import annotations

from pitstop.catalog import Tip


class AliasNotCopy(Tip):
    code = "PIT804"
    slug = "alias-not-copy"
    title = "b = a followed by an in-place op on b also modifies a; use a.clone()"
    faces = "L"
    seeds = ("002",)
    truth = (
        "Seed 002 is right. Two additions: `.clone()` is recorded by autograd (gradients flow "
        "back to the source), so use `a.detach().clone()` for an independent snapshot; and in "
        "PyTorch, unlike Python lists, slicing (`a[:]`) and `.view()` also return views that "
        "share memory with `a`."
    )

    what = """
        Flags `b = a` where `a` was bound to a torch tensor expression, followed in the same
        scope by an in-place op on `b` (`b.<op>_(…)`, `b[…] = …`, `b += …`). It reports at the
        alias assignment and offers an unsafe fix, `b = a.clone()`: unsafe because the copy
        costs memory and time, and because code that relied on the shared update would change
        behaviour.
    """
    why = """
        Assignment binds a second name to the same tensor object; no data is copied. An
        in-place op through either name changes both. Checked here: after `b = a; b += 1`,
        `a` reads `[2., 3., 4.]`. If autograd saved `a` for the backward pass, the in-place
        change also makes `backward()` fail ("one of the variables needed for gradient
        computation has been modified by an inplace operation"), also checked here.
    """
    example = """
        Seed 002's example:
        ```python
        a = torch.tensor([1.0, 2.0, 3.0])
        b = a            # same tensor, not a copy
        b += 1           # a is now [2., 3., 4.] as well
        ```
    """
    use_instead = """
        ```python
        b = a.clone()            # new memory; still connected to autograd
        b += 1

        b = a + 1                # or simply compute out of place

        best = {k: v.detach().clone() for k, v in model.state_dict().items()}  # snapshot
        ```
    """
    when_not = """
        When updating the original through the second name is the intent (a short local name
        for a buffer you mean to modify), the alias is correct: silence it with
        `# noqa: PIT804`. An alias that is never modified in place costs nothing and needs no
        clone. When you only need a new value, an out-of-place op (`b = a + 1`) allocates one
        new tensor, like clone-then-modify, but without the extra copy.
    """
    references = (
        "PyTorch docs, torch.clone: https://pytorch.org/docs/stable/generated/torch.clone.html",
        "PyTorch docs, Tensor Views: https://pytorch.org/docs/stable/tensor_view.html",
        "PyTorch docs, Autograd mechanics — In-place operations with autograd: https://pytorch.org/docs/stable/notes/autograd.html#in-place-operations-with-autograd",
        "Seed 002 (Common mistakes — Copy an array)",
    )


# --- lint face ---
from pitstop.lint.rule import UNSAFE, LintRule, cst, nodes


class AliasNotCopyRule(LintRule, tip="PIT804"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    message = "`b = a` does not copy a tensor: the in-place op that follows changes both; use a.clone()"
    fix = UNSAFE

    def __init__(self, ctx):
        super().__init__(ctx)
        self.aliases = {}  # (scope, name) -> (assign node, source Name)

    def _key(self, name):
        return (self.ctx.scope, name)

    def _inplace(self, name):
        found = self.aliases.pop(self._key(name), None)
        if found is not None:
            assign, source = found
            b, a = name, source.value
            self.report(assign, f"`{b} = {a}` makes an alias, not a copy: the in-place op on `{b}` below also "
                                f"changes `{a}`; use {a}.clone()",
                        fix=self.ctx.fix(UNSAFE, f"Copy: {b} = {a}.clone()", (source, f"{a}.clone()")))

    def visit_Assign(self, node):
        for t in node.targets:
            target = t.target
            if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                self._inplace(target.value.value)
            for name in nodes.bound_names(target):
                self.aliases.pop(self._key(name), None)
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and isinstance(node.value, cst.Name):
            if self.ctx.is_tensor_expr(self.ctx.value_of(node.value.value)):
                self.aliases[self._key(node.targets[0].target.value)] = (node, node.value)

    def visit_AugAssign(self, node):
        if isinstance(node.target, cst.Name):
            self._inplace(node.target.value)

    def visit_Call(self, node):
        name = nodes.method(node)
        if name and name.endswith("_") and not name.endswith("__") and isinstance(nodes.receiver(node), cst.Name):
            self._inplace(nodes.receiver(node).value)


