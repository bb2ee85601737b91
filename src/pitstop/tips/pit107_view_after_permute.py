"""PIT107 view-after-permute: use .reshape after .permute/.transpose, not .view or .contiguous().view."""

from __future__ import annotations

from pitstop.catalog import Tip


class ViewAfterPermute(Tip):
    code = "PIT107"
    slug = "view-after-permute"
    title = ".view() merging dimensions right after .permute()/.transpose() fails; .reshape() works"
    faces = "L"
    seeds = ("000",)
    truth = (
        "`.contiguous()` copies when the tensor is not contiguous (and returns the tensor "
        "itself when it is, checked here), so seed 000's \"creates a new tensor\" holds only "
        "in the first case. A copy is a copy: do it once (at data preparation), not in every "
        "step. `.reshape` returns a view when the strides allow it and copies only when they "
        "do not, so it does the right thing after a permute."
    )

    what = """
        Flags `.permute(…)`, `.transpose(…)`, `.t()`, `.T` or `.mT` immediately followed by a
        `.view(…)` that merges dimensions: a `-1`, a product (`H * D`), or fewer dimensions than
        the permuted tensor has; reported at the `.view` call. A view that only splits a
        dimension (`x.transpose(1, 2).view(B, C, H, W)`) or keeps the shape is valid and
        zero-copy, and is not flagged. The fix, `.reshape(…)`, is offered as unsafe:
        `reshape` returns a copy where `view` would have raised, so code that writes into the
        result expecting to modify the original tensor would silently stop doing so in those
        cases.
    """
    why = """
        `.view` never copies: it only reinterprets the strides, so the new shape must be
        compatible with the memory order. After a permute or transpose the memory order no
        longer follows the logical order, and merging the swapped dimensions raises
        `RuntimeError: view size is not compatible with input tensor's size and stride (at
        least one dimension spans across two contiguous subspaces). Use .reshape(...)
        instead.` (checked here). The usual patch, `.contiguous().view(...)`, works but
        spells out a copy; `.reshape(...)` copies only when it has to.
    """
    example = """
        ```python
        # attn: (B, H, T, D) -> (B, T, H * D)
        out = attn.transpose(1, 2).view(B, T, H * D)  # RuntimeError: view size is not compatible
        ```
    """
    use_instead = """
        ```python
        out = attn.transpose(1, 2).reshape(B, T, H * D)   # a view if possible, else one copy
        ```
        Where a layout has to be materialized for many later uses (a tensor reused every
        epoch), call `.contiguous()` once, outside the training loop, and keep the result.
    """
    when_not = """
        `reshape` removes the crash and the boilerplate, not the copy: when the merged
        dimensions are not contiguous (the attention example above) it copies on every call,
        exactly like `.contiguous().view(...)`. When the `.view` does not merge permuted
        dimensions (it only splits one, say) it already works without a copy and `reshape`
        returns the same view. `.T` on tensors that are not 2-D is deprecated (PyTorch warns);
        use `.mT` or `.permute`.
    """
    references = (
        "PyTorch docs, torch.Tensor.view: https://pytorch.org/docs/stable/generated/torch.Tensor.view.html",
        "PyTorch docs, torch.reshape: https://pytorch.org/docs/stable/generated/torch.reshape.html",
        "PyTorch docs, Tensor Views: https://pytorch.org/docs/stable/tensor_view.html",
        "PyTorch docs, torch.Tensor.contiguous: https://pytorch.org/docs/stable/generated/torch.Tensor.contiguous.html",
        "Seed 000 (General Speed-Up Tricks: tensor.contiguous())",
    )


# --- lint face ---
from pitstop.lint.rule import UNSAFE, LintRule, cst, nodes


class ViewAfterPermuteRule(LintRule, tip="PIT107"):
    runs = "step"  # paid every step wherever the reported line is
    message = (".view() merges dimensions of a permuted/transposed tensor: it raises on the non-contiguous "
               "layout; use .reshape()")
    fix = UNSAFE

    def visit_Call(self, node):
        if nodes.method(node) != "view":
            return
        inner = nodes.receiver(node)
        rank = None
        if isinstance(inner, cst.Call) and nodes.method(inner) in ("permute", "transpose", "t"):
            if nodes.method(inner) == "permute":
                pos = nodes.positional(inner)
                rank = len(pos[0].value.elements) if len(pos) == 1 and isinstance(pos[0].value, (cst.List, cst.Tuple)) \
                    else None if any(a.star for a in inner.args) else len(inner.args)
            elif nodes.method(inner) == "t":
                rank = 2
        elif not (isinstance(inner, cst.Attribute) and inner.attr.value in ("T", "mT")):
            return
        if self._may_merge(node, rank) and not self._adjacent_merge(inner, node, rank):
            self.report(node, fix=self.ctx.fix(UNSAFE, "Use .reshape() (copies only when it must)",
                                               (node.func.attr, "reshape")))

    @staticmethod
    def _adjacent_merge(permute, view, rank):
        """``x.permute(0, 2, 3, 1).view(1, -1, dim)``: a literal permutation that keeps two source dimensions
        side by side in order (2, 3), and a view one dimension shorter: the one merge may be of those,
        which ``.view()`` does without a copy (DINO's positional embedding): not judged (issue 31)."""
        if rank is None or nodes.method(permute) != "permute" or len(nodes.positional(view)) != rank - 1:
            return False
        pos = nodes.positional(permute)
        items = [e.value for e in pos[0].value.elements] if len(pos) == 1 and isinstance(
            pos[0].value, (cst.List, cst.Tuple)) else [a.value for a in pos]
        perm = [nodes.int_value(v) for v in items]
        return None not in perm and any(b == a + 1 for a, b in zip(perm, perm[1:]))

    @staticmethod
    def _may_merge(view, rank):
        """A view that only splits dimensions (``x.transpose(1, 2).view(B, C, H, W)``) or keeps the
        shape is valid and zero-copy; one that merges shows a ``-1``, a product, or fewer dimensions
        than the permuted tensor has. Shapes the lint cannot count (``*size``) are not judged."""
        args = view.args
        if not args or any(a.star or a.keyword for a in args):
            return False  # .view(B, C, *size): the lint cannot count the dimensions
        values = [a.value for a in args]
        if len(values) == 1 and isinstance(values[0], (cst.List, cst.Tuple)):
            values = [e.value for e in values[0].elements]
        if any(nodes.number_value(v) == -1 or nodes.contains_op(v, cst.Multiply) for v in values):
            return True
        if len(values) == 1 and isinstance(values[0], (cst.Name, cst.Attribute)):
            return False  # .view(dtype) / .view(shape): not judged
        return rank is not None and len(values) < rank
