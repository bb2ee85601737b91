"""What rules emit (:class:`ReportSink`, mixed into :class:`pitstop.lint.context.FileContext`):
pending reports (judged after the whole file, see ``Pending.when``) and fixes made of edits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import libcst as cst

__all__ = ["ReportSink", "FixSpec", "Pending"]


@dataclass(frozen=True)
class FixSpec:
    applicability: str
    message: str
    edits: tuple  # ((original node, replacement: str | CSTNode), ...)
    layout: bool = False  # changes the state_dict layout (see pitstop.lint.findings.Fix.layout)


@dataclass
class Pending:
    code: str
    node: Any
    message: str
    fix: FixSpec | None
    when: Callable[[], bool] | None
    where: Any = None  # pitstop.lint.frequency.Where of the report (None: reported after the walk)
    runs: str = "site"  # the rule's LintRule.runs
    frequency: str = "step"  # judged once the file was walked
    function: Any = None  # a FunctionDef the report is about (its frequency is the report's)
    pattern: str = ""  # the rule's sub-pattern ("" for its main one)
    concern: str = "cost"  # the rule's LintRule.concern
    use: Any = None  # runs="use": the node whose uses (loops over the bound object) give the frequency


class ReportSink:
    """Collects the reports of one file; needs ``module``, ``pending``, ``walked`` and ``where`` from the
    class it is mixed into."""

    def report(self, code: str, node: Any, message: str, fix: FixSpec | None, when, runs: str = "site",
               function: Any = None, pattern: str = "", concern: str = "cost", use: Any = None) -> None:
        where = None if self.walked else self.where()
        self.pending.append(Pending(code, node, message, fix, when, where, runs, function=function, pattern=pattern,
                                    concern=concern, use=use))

    def source_of(self, node: cst.CSTNode) -> str:
        """The source text of ``node`` (``code`` is a tip's code everywhere else)."""
        return self.module.code_for_node(node)

    @staticmethod
    def fix(applicability: str, message: str, *edits: tuple, layout: bool = False) -> FixSpec:
        """A fix made of ``(node, replacement)`` edits; a replacement is code or a node. ``layout``: the fix
        changes the model's state_dict layout (always unsafe; its message must say what silently breaks)."""
        return FixSpec("unsafe" if layout else applicability, message, tuple(edits), layout)
