"""Plain, picklable results of linting: :class:`Finding`, :class:`Fix`, :class:`Edit`.

Positions follow ruff: lines are 1-based, columns 1-based, and ``end_column`` is the column
just after the last character. Edits also carry 0-based character offsets into the source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Edit", "Fix", "Finding", "FileError", "FileResult"]


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

    def to_dict(self) -> dict:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [e.to_dict() for e in self.edits]}


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    filename: str
    line: int
    column: int
    end_line: int
    end_column: int
    fix: Fix | None = None

    @property
    def doc(self) -> str:
        return f"pitstop explain {self.code}"

    def sort_key(self) -> tuple:
        return (self.filename, self.line, self.column, self.code)

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
            "url": f"docs/tips/{self.code}.md",
            "doc": self.doc,
            "fix": self.fix.to_dict() if self.fix else None,
        }


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted: printed as ``path: cannot parse: reason``."""

    filename: str
    reason: str

    def __str__(self) -> str:
        return f"{self.filename}: cannot parse: {self.reason}"


@dataclass
class FileResult:
    filename: str
    findings: list[Finding] = field(default_factory=list)
    error: FileError | None = None
    fixed: int = 0  # findings removed by applied fixes
    diff: str = ""  # unified diff of the fixes (--diff), or "" when nothing changes
    written: bool = False
    note: str = ""  # e.g. a fix that was dropped because the result did not compile
