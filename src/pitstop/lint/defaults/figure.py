"""The measured figure of one lint rule or sub-pattern, and the bar it must clear to run by default
(see :mod:`pitstop.lint.defaults`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Figure", "MIN_FINDINGS", "MIN_PRECISION"]

MIN_FINDINGS = 10
MIN_PRECISION = 0.95


@dataclass(frozen=True)
class Figure:
    """The labelled findings of one rule (``PIT201``) or sub-pattern (``PIT201/chain``) the current rules report."""

    rule: str
    confirmed_right: int = 0
    confirmed_wrong: int = 0
    confirmed_debatable: int = 0
    pending_right: int = 0
    pending_wrong: int = 0
    pending_debatable: int = 0
    #: wrong findings a later change removed (no longer reported: left out of the counts above)
    silenced_wrong: int = 0

    @property
    def code(self) -> str:
        return self.rule.split("/", 1)[0]

    @property
    def pattern(self) -> str:
        return self.rule.split("/", 1)[1] if "/" in self.rule else ""

    @property
    def right(self) -> int:
        return self.confirmed_right + self.pending_right

    @property
    def wrong(self) -> int:
        return self.confirmed_wrong + self.pending_wrong

    @property
    def debatable(self) -> int:
        return self.confirmed_debatable + self.pending_debatable

    @property
    def precision(self) -> float | None:
        """right / (right + wrong) over every label (debatable ones left out); None without any."""
        n = self.right + self.wrong
        return self.right / n if n else None

    @property
    def confirmed_precision(self) -> float | None:
        n = self.confirmed_right + self.confirmed_wrong
        return self.confirmed_right / n if n else None

    @property
    def stable(self) -> bool:
        """On by default (see the module docstring)."""
        n = self.confirmed_right + self.confirmed_wrong
        return (n >= MIN_FINDINGS and self.confirmed_precision >= MIN_PRECISION
                and self.precision is not None and self.precision >= MIN_PRECISION)
