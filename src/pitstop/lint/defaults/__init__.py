"""Which lint rules run by default: each rule, or sub-pattern of a rule, by its measured precision (issue 42).

Every finding of a lint rule that was ever judged by hand on real code is a label in
``tests/lint_corpus/labels.toml`` (right, wrong or debatable; the labelled corpus and every fresh sample of
``docs/lint-precision.md``). ``benchmarks/lint_precision.py --write-figures`` counts them per rule and
sub-pattern into :mod:`pitstop.lint.defaults.measured` (a generated module: never typed by hand;
``tests/test_lint_defaults.py`` checks that it equals what the labels give).

The counts leave out the labels of findings the current rules no longer report (``quiet`` labels: a wrong
finding a later change removed, checked against the corpus by ``tests/test_lint_corpus.py``), and they are
split by round: a sample's labels decide defaults only once a later sample, judged before any change made on
it, has confirmed them (``confirmed_*``); the newest round's labels (``pending_*``) can turn a rule off, never on.

A rule or sub-pattern is **on by default** (stable) when its confirmed labels hold at least
:data:`MIN_FINDINGS` right-or-wrong findings at a precision (right / (right + wrong)) of at least
:data:`MIN_PRECISION`, and the pending labels added to them keep it there. The others are **preview**: they
run with ``pitstop lint --preview``, or when selected by their exact code (``--select PIT603``).
"""

from __future__ import annotations

from pitstop.lint.defaults.figure import MIN_FINDINGS, MIN_PRECISION, Figure
from pitstop.lint.defaults.measured import FIGURES, NEWEST_ROUND

__all__ = ["Figure", "MIN_FINDINGS", "MIN_PRECISION", "FIGURES", "NEWEST_ROUND", "figure_of", "is_stable",
           "figures_of_code", "status_line"]

_TABLE = {f.rule: f for f in FIGURES}


def figure_of(code: str, pattern: str = "") -> Figure:
    """The measured figure of a rule or sub-pattern (zero counts when it has no labels)."""
    rule = f"{code}/{pattern}" if pattern else code
    return _TABLE.get(rule) or Figure(rule)


def is_stable(code: str, pattern: str = "") -> bool:
    return figure_of(code, pattern).stable


def figures_of_code(code: str) -> list[Figure]:
    """The rule's main figure first, then its sub-patterns' (those that have labels)."""
    table = _TABLE
    main = table.get(code) or Figure(code)
    return [main] + sorted((f for f in table.values() if f.code == code and f.pattern), key=lambda f: f.rule)


def status_line(fig: Figure) -> str:
    """``on by default: precision 0.98 over 72 labelled findings (70 right, 2 wrong; 5 debatable)`` or
    ``preview: ...``: the figure and the status, as ``pitstop explain`` and ``pitstop tips`` show them."""
    status = "on by default" if fig.stable else "preview (--preview or --select " + fig.code + ")"
    n = fig.right + fig.wrong
    if not n:
        measured = f"no labelled right or wrong finding yet ({fig.debatable} debatable)" if fig.debatable else \
            "no labelled finding yet"
    else:
        measured = (f"precision {fig.precision:.2f} over {n} labelled finding{'s' * (n != 1)} "
                    f"({fig.right} right, {fig.wrong} wrong; {fig.debatable} debatable)")
    pending = fig.pending_right + fig.pending_wrong + fig.pending_debatable
    tail = f", {pending} of them from the newest sample (can turn it off, not on)" if pending else ""
    return f"{status}: {measured}{tail}"
