"""Where the walk is (:class:`Position`, mixed into :class:`pitstop.lint.context.FileContext`):
qualified names through the scopes' imports and bindings, the enclosing loop, function, class
and frames, the parent node, and the step site a report is judged at.
Needs ``scope``, ``stack`` and ``ancestors`` (kept by :class:`pitstop.lint.walk.FileWalk`) and
``framework_class`` (:class:`pitstop.lint.matchers.Matchers`)."""

from __future__ import annotations

from typing import Any

import libcst as cst

from pitstop.lint.frames import Loop, Scope, StepSite
from pitstop.lint.nodes import dotted

__all__ = ["Position", "STEP_METHODS"]

#: methods a framework calls once per training step (Lightning, HF Trainer)
STEP_METHODS = frozenset({"training_step", "compute_loss", "forward"})


class Position:
    """Questions about the place of the node being visited."""

    @property
    def parent(self) -> cst.CSTNode | None:
        """Parent of the node being visited."""
        return self.ancestors[-2] if len(self.ancestors) > 1 else None

    def qualname(self, expr: cst.BaseExpression | None) -> str | None:
        """``torch.optim.AdamW`` for ``T.optim.AdamW`` after ``import torch as T``; None when
        the root name is local, a builtin or unknown. Matching is never by bare suffix."""
        if isinstance(expr, cst.Name):
            return self.scope.resolve(expr.value)
        if isinstance(expr, cst.Attribute):
            head = self.qualname(expr.value)
            return None if head is None else f"{head}.{expr.attr.value}"
        return None

    def call_name(self, node: cst.CSTNode) -> str | None:
        """Qualified name of the function a Call calls (None for anything else)."""
        return self.qualname(node.func) if isinstance(node, cst.Call) else None

    def function_frames(self) -> tuple:
        """Frames from the innermost function/lambda scope (exclusive) to here."""
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            f = stack[i]
            if isinstance(f, Scope) and f.kind != "class":
                return tuple(stack[i + 1:])
        return tuple(stack)

    def site(self) -> StepSite:
        fn = self.current_function()
        step = fn is not None and fn.name.value in STEP_METHODS and (self.framework_class() or "").startswith(
            ("lightning.", "pytorch_lightning.", "transformers.", "trl."))
        return StepSite(self.function_frames(), step)

    def loop(self) -> Loop | None:
        """The innermost loop of the current function around the node."""
        for f in reversed(self.stack):
            if isinstance(f, Loop):
                return f
            if isinstance(f, Scope) and f.kind != "module":
                return None
        return None

    def current_function(self) -> cst.FunctionDef | None:
        for f in reversed(self.stack):
            if isinstance(f, Scope) and f.kind == "function":
                return f.node
        return None

    def current_class(self) -> cst.ClassDef | None:
        for f in reversed(self.stack):
            if isinstance(f, Scope) and f.kind == "class":
                return f.node
        return None

    def value_of(self, expr: cst.BaseExpression | str, same_scope: bool = False) -> Any:
        key = expr if isinstance(expr, str) else dotted(expr)
        return None if key is None else self.scope.lookup(key, same_scope)
