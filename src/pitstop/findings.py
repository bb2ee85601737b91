"""The one runtime finding (torch-free): what ``pitstop doctor`` and ``pitstop trace`` report,
one measured problem tied to a catalog code (lint's source findings are
:class:`pitstop.lint.findings.LintFinding`). Ranked by :mod:`pitstop.severity`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pitstop.severity import rank_key

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """One measured problem, tied to a catalog code.

    ``impact_kind`` is ``time`` (``impact_share`` = estimated share of step time a fix
    saves), ``memory`` (share of peak memory), or ``correctness`` (results are wrong or
    training is degraded; no share). ``where`` lists source locations ("file:line").
    """

    code: str
    title: str
    evidence: str
    fix: str
    severity: str
    impact_kind: str = "time"
    impact_share: float | None = None
    impact_seconds: float | None = None
    impact_bytes: int | None = None
    where: tuple[str, ...] = ()
    #: the rank a ``pitstop trace`` finding is about (None: one process, or the whole job)
    rank: int | None = None
    #: a summary of lost time that names no change to make (PIT905): ranked after the causes,
    #: never above ``medium`` (:func:`pitstop.severity.settle`)
    summary: bool = False

    @property
    def impact(self) -> float | None:
        """The share of the step a fix could save (``pitstop trace``'s name for ``impact_share``)."""
        return self.impact_share

    @property
    def explain(self) -> str:
        return f"pitstop explain {self.code}"

    def sort_key(self) -> tuple:
        return rank_key(self.severity, self.impact_share, self.code, self.summary, self.impact_kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "title": self.title,
            "severity": self.severity,
            "impact": {"kind": self.impact_kind, "share": self.impact_share,
                       "seconds_per_step": self.impact_seconds, "bytes": self.impact_bytes},
            "evidence": self.evidence,
            "fix": self.fix,
            "explain": self.explain,
            "where": list(self.where),
            "summary": self.summary,
        }

    def trace_dict(self) -> dict[str, Any]:
        """The ``pitstop trace`` JSON form (``docs/trace-schema.json``: ``impact`` is the share)."""
        return {"code": self.code, "title": self.title, "severity": self.severity, "impact": self.impact_share,
                "evidence": self.evidence, "fix": self.fix, "rank": self.rank}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """A finding read back from either JSON form (the doctor's or ``pitstop trace``'s)."""
        imp = d.get("impact")
        kw: dict[str, Any] = ({"impact_kind": imp.get("kind", "time"), "impact_share": imp.get("share"),
                               "impact_seconds": imp.get("seconds_per_step"), "impact_bytes": imp.get("bytes")}
                              if isinstance(imp, dict) else {"impact_share": imp})
        return cls(code=d["code"], title=d["title"], evidence=d["evidence"], fix=d["fix"], severity=d["severity"],
                   where=tuple(d.get("where", ())), rank=d.get("rank"), summary=bool(d.get("summary", False)), **kw)
