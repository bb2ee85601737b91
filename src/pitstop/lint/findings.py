"""Plain, picklable results of linting: :class:`LintFinding`, :class:`Fix`, :class:`Edit`.

Positions follow ruff: lines are 1-based, columns 1-based, and ``end_column`` is the column
just after the last character. Edits also carry 0-based character offsets into the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Edit", "Fix", "LintFinding", "FileError", "FileResult", "ParseError", "CONCERNS"]

_SEVERITY = {"step": "high", "epoch": "medium", "once": "low", "unknown": "low"}  # as pitstop.lint.frequency.SEVERITY
#: what a rule is about: cost (time, memory), correctness (wrong results), security, deprecation. Only a
#: cost finding in code that runs once (or whose frequency is unknown) is hidden by default: running once
#: makes neither a wrong result, nor an unsafe load, nor a deprecated call, any better
CONCERNS = ("cost", "correctness", "security", "deprecation")


@dataclass(frozen=True)
class Edit:
    content: str
    line: int
    column: int
    end_line: int
    end_column: int
    start: int  # character offsets in the linted source
    end: int

    def to_dict(self) -> dict:
        return {"content": self.content,
                "location": {"row": self.line, "column": self.column},
                "end_location": {"row": self.end_line, "column": self.end_column}}


@dataclass(frozen=True)
class Fix:
    applicability: str  # "safe" | "unsafe"
    message: str
    edits: tuple[Edit, ...]
    #: the fix changes the model's ``state_dict`` layout (a parameter removed or renamed): checkpoints
    #: saved before no longer load strictly, and a ``strict=False`` load silently drops what does not
    #: fit. Always unsafe; applied only with ``--unsafe-fixes`` and never counted among the fixes the
    #: summary offers
    layout: bool = False

    def to_dict(self) -> dict:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [e.to_dict() for e in self.edits], **({"state_dict_layout": True} if self.layout else {})}


@dataclass(frozen=True)
class LintFinding:
    code: str
    name: str
    message: str
    filename: str
    line: int
    column: int
    end_line: int
    end_column: int
    fix: Fix | None = None
    cell: int | None = None  # notebooks: the cell (counted from 1 over all cells); lines are within it
    #: how often the reported code runs: "step" (every training step), "epoch" (per epoch or
    #: evaluation, or every N steps), "once" (setup, converters, exports), "unknown" (called only where
    #: the lint cannot resolve the call: never claimed per step); see :mod:`pitstop.lint.frequency`
    frequency: str = "step"
    #: the sub-pattern of the rule that made it ("" for the rule's main pattern): defaults are decided per
    #: rule and sub-pattern from their measured precision (:mod:`pitstop.lint.defaults`)
    pattern: str = ""
    #: one of :data:`CONCERNS` (the rule's ``LintRule.concern``)
    concern: str = "cost"

    @property
    def severity(self) -> str:
        """Follows the frequency: "high" (per step), "medium" (per epoch / evaluation), "low" (once)."""
        return _SEVERITY.get(self.frequency, "high")

    @property
    def hideable(self) -> bool:
        """Left out of the default view: a cost finding in code that runs once or whose frequency is
        unknown (``--all`` shows it); correctness, security and deprecation findings never are."""
        return self.concern == "cost" and self.frequency in ("once", "unknown")

    @property
    def rule(self) -> str:
        """``PIT201`` or, for a sub-pattern, ``PIT201/chain``: the unit whose precision is measured."""
        return f"{self.code}/{self.pattern}" if self.pattern else self.code

    @property
    def location(self) -> str:
        """``path`` or, in a notebook, ``path:cell N`` (ruff's form), before ``:line:column``."""
        return self.filename if self.cell is None else f"{self.filename}:cell {self.cell}"

    @property
    def doc(self) -> str:
        """Where to read about the code: a command that works wherever pitstop is installed
        (the JSON has no ``url``: the project publishes no docs site to point at)."""
        return f"pitstop explain {self.code}"

    def sort_key(self) -> tuple:
        return (self.filename, self.cell or 0, self.line, self.column, self.code)

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "filename": self.filename,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "doc": self.doc,
            "fix": self.fix.to_dict() if self.fix else None,
            "frequency": self.frequency,
            "severity": self.severity,
            "concern": self.concern,
            **({"pattern": self.pattern} if self.pattern else {}),
            **({"cell": self.cell} if self.cell is not None else {}),
        }


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted: printed as ``path: cannot parse: reason``."""

    filename: str
    reason: str
    line: int | None = None  # where, when known (syntax errors)
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.filename}: cannot parse: {self.reason}"

    def to_dict(self) -> dict:
        """A JSON entry shaped like a finding, as ruff reports syntax errors: ``code`` is null."""
        line, column = self.line or 1, self.column or 1
        return {"code": None, "name": "cannot-parse", "message": f"cannot parse: {self.reason}",
                "filename": self.filename, "line": line, "column": column, "end_line": line,
                "end_column": column, "doc": None, "fix": None}


#: Deprecated alias of :class:`LintFinding`, its name before it was set apart from the doctor's
#: ``pitstop.doctor.analysis.check.Finding``; kept so ``pitstop.lint.Finding`` still imports.
Finding = LintFinding


@dataclass
class FileResult:
    filename: str
    findings: list[LintFinding] = field(default_factory=list)
    error: FileError | None = None
    fixed: int = 0  # findings removed by applied fixes
    diff: str = ""  # unified diff of the fixes (--diff), or "" when nothing changes
    written: bool = False
    note: str = ""  # e.g. a fix that was dropped because the result did not compile


class ParseError(Exception):
    """The text cannot be linted; the message is the reason shown after ``cannot parse:``
    (``line``/``column``: where, when known)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line, self.column = line, column
