"""What one ``pitstop lint`` run keeps, shows, counts and fixes (issue 42: one view).

Text, GitHub, JSON and SARIF print the same findings and ``--fix``/``--diff`` fix only those: by default the
stable rules and sub-patterns (:mod:`pitstop.lint.defaults`), minus cost findings in code that runs once or
whose frequency is unknown (``LintFinding.hideable``); ``--preview`` (or selecting a rule by its exact code)
adds the preview ones, ``--all`` the hidden ones, in every output alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.lint.defaults import is_stable

__all__ = ["View", "EVERYTHING"]


@dataclass(frozen=True)
class View:
    show_all: bool = False  # --all: cost findings in code that runs once (or of unknown frequency) too
    preview: bool = False  # --preview: every rule and sub-pattern, not only those on by default
    explicit: frozenset = frozenset()  # codes selected by their exact code: every sub-pattern of them runs

    def runs(self, code: str, patterns) -> bool:
        """Whether a rule with these measured sub-patterns (its main one "" included) runs at all."""
        return self.preview or code in self.explicit or any(is_stable(code, p) for p in patterns)

    def selects(self, code: str, pattern: str) -> bool:
        """A finding of this rule and sub-pattern is kept (shown, or hidden and counted)."""
        return self.preview or code in self.explicit or is_stable(code, pattern)

    def shows(self, finding) -> bool:
        """The finding is printed in every format, counts for the exit status and may be fixed."""
        return self.selects(finding.code, finding.pattern) and (self.show_all or not finding.hideable)


#: every finding of the rules asked for (the API's default: ``lint_source`` without a view)
EVERYTHING = View(show_all=True, preview=True)
