"""``pitstop lint``: static rules over PyTorch training code (face L), with safe autofixes.

Importing this package is cheap and torch-free: tip modules import :mod:`pitstop.lint.rule`
at catalog load, so everything built on libcst is imported lazily (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

from pitstop.lint.rule import SAFE, UNSAFE, LintRule

_LAZY = {
    "Finding": "pitstop.lint.findings",
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
    "run_tasks": "pitstop.lint.api",
    "Task": "pitstop.lint.api",
    "LintOptions": "pitstop.lint.api",
}

__all__ = ["LintRule", "SAFE", "UNSAFE", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pitstop.lint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
