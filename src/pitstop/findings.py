"""The one runtime finding (torch-free): what ``pitstop doctor`` and ``pitstop trace`` report,
one measured problem tied to a catalog code (lint's source findings are
:class:`pitstop.lint.findings.LintFinding`). Ranked by :mod:`pitstop.severity`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pitstop.severity import SEVERITIES, rank_key

__all__ = ["Finding", "one_claim"]


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


def _more_severe(a: str, b: str) -> str:
    return min((a, b), key=lambda s: SEVERITIES.index(s) if s in SEVERITIES else len(SEVERITIES))


def one_claim(findings: Iterable[Finding], same_cost: Mapping[str, str]) -> tuple[list[Finding], list[tuple[str, str]]]:
    """One cost, one finding: a time finding whose code ``same_cost`` maps to another code found
    for the same rank (two fixes for the same seconds, e.g. bf16 autocast and TF32 for the same
    fp32 GEMMs) becomes an option of that finding, with its own expected gain; the finding's
    impact is the better option's, never their sum. Returns the findings and, for each folded
    one, ``(code, why)``."""
    items = list(findings)
    first = {}
    for f in items:
        first.setdefault((f.code, f.rank), f)
    into: dict[int, list[Finding]] = {}
    folded: list[tuple[str, str]] = []
    for f in items:
        target = first.get((same_cost.get(f.code, ""), f.rank))
        if target is None or target is f or f.impact_kind != "time" or target.impact_kind != "time":
            continue
        into.setdefault(id(target), []).append(f)
        folded.append((f.code, f"\"{f.title}\" claims the same time as {target.code}: one finding, its fix an "
                                f"option there"))
    gone = {id(f) for alts in into.values() for f in alts}
    out = []
    for f in items:
        if id(f) in gone:
            continue
        for alt in into.get(id(f), ()):
            gain = f"about {100 * alt.impact_share:.1f}% of the step" if alt.impact_share is not None else "unsized"
            share = max((x for x in (f.impact_share, alt.impact_share) if x is not None), default=None)
            secs = max((x for x in (f.impact_seconds, alt.impact_seconds) if x is not None), default=None)
            f = dataclasses.replace(
                f, severity=_more_severe(f.severity, alt.severity), impact_share=share, impact_seconds=secs,
                evidence=f"{f.evidence} Another fix for the same time, {alt.code} ({alt.title}): {gain}. "
                         "The two claim the same seconds, so their gains do not add: pick one.",
                fix=f"{f.fix}; or instead: {alt.fix}", where=tuple(dict.fromkeys(f.where + alt.where)))
        out.append(f)
    return out, folded
