"""``pitstop lint``: static rules over PyTorch training code (face L), with safe autofixes.

Importing this package is cheap and torch-free: tip modules import :mod:`pitstop.lint.rule`
at catalog load, so everything built on libcst is imported lazily (PEP 562).
"""

from __future__ import annotations

from pitstop._lazy import lazy_exports
from pitstop.lint.rule import SAFE, UNSAFE, LintRule

_LAZY = {
    "LintFinding": "pitstop.lint.findings",
    "Finding": "pitstop.lint.findings",  # deprecated alias of LintFinding
    "Fix": "pitstop.lint.findings",
    "Edit": "pitstop.lint.findings",
    "FileError": "pitstop.lint.findings",
    "FileContext": "pitstop.lint.context",
    "LintConfig": "pitstop.lint.config",
    "lint_source": "pitstop.lint.runner",
    "fix_source": "pitstop.lint.runner",
    "ParseError": "pitstop.lint.runner",
    "all_rule_classes": "pitstop.lint.runner",
    "rules_for": "pitstop.lint.runner",
    "run_tasks": "pitstop.lint.parallel",
    "Task": "pitstop.lint.parallel",
    "LintOptions": "pitstop.lint.parallel",
}

__all__ = ["LintRule", "SAFE", "UNSAFE", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
