"""The one severity ranking of findings (doctor, trace, compare; torch-free).

Time and memory findings take their severity from the share of the step (or of peak memory)
a fix saves: at least ``high_share`` is high, at least ``medium_share`` medium, else low
(the two cut-offs of the one :class:`~pitstop.thresholds.Thresholds`). Findings are
ranked by severity, then causes before summaries, then wrong results before cost (a
``correctness`` finding has no share of the step, and a run that trains the wrong model is not
made right by training it faster), then by that share, then by code.

A *summary* finding (``Finding.summary``: PIT905's "low model FLOP utilisation" / "the GPU waits
for host code") states how much of the step is lost without naming what to change. It never
outranks a cause: :func:`settle` makes it ``low`` whenever a report holds a cause (a time finding
that is not a summary), and at most ``medium`` otherwise, whatever its share.

A time finding never claims more than the step, and a report's causes never add up past it
(:func:`within_step`, part of :func:`settle`): in rank order each cause keeps what the causes
before it left of the step, its share (and seconds) cut to that, its evidence saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol, TypeVar

__all__ = ["SEVERITIES", "severity_for", "rank_key", "settle", "within_step", "Cutoffs", "Ranked"]

#: Severity order, most urgent first.
SEVERITIES = ("high", "medium", "low")


class Cutoffs(Protocol):
    high_share: float
    medium_share: float


def severity_for(share: float | None, th: Cutoffs) -> str:
    """The severity of a finding whose fix saves ``share`` (None: cannot be sized -> low)."""
    if share is None:
        return "low"
    if share >= th.high_share:
        return "high"
    if share >= th.medium_share:
        return "medium"
    return "low"


def rank_key(severity: str, share: float | None, code: str, summary: bool = False,
             kind: str = "time") -> tuple[int, bool, bool, float, str]:
    """The sort key of a finding: severity, causes before summaries, ``correctness`` (``kind``)
    before time and memory, the larger share first, the code."""
    return (SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES), summary,
            kind != "correctness", -(share or 0.0), code)


class Ranked(Protocol):
    severity: str
    impact_kind: str
    impact_share: float | None
    impact_seconds: float | None
    evidence: str
    code: str
    summary: bool


R = TypeVar("R", bound=Ranked)

#: the most a summary finding can be when no cause is found
SUMMARY_CAP = "medium"


def _key(f: Ranked) -> tuple:
    return rank_key(f.severity, f.impact_share, f.code, f.summary, f.impact_kind)


def within_step(findings: Iterable[R], th: Cutoffs | None = None) -> list[R]:
    """Every time finding's share at most 1 (the whole step); per rank (``rank`` attribute, None
    for one process), the causes (time, not summary) in rank order each cut to what the ones
    before left of the step, their seconds in proportion, the evidence saying so; with ``th``
    the severity of a cut one follows its share (never raised)."""
    found = sorted(findings, key=_key)
    used: dict[object, float] = {}
    out = []
    for f in found:
        share = f.impact_share
        if f.impact_kind != "time" or share is None or share <= 0:
            out.append(f)
            continue
        key = getattr(f, "rank", None)
        room = 1.0 if f.summary else max(0.0, 1.0 - used.get(key, 0.0))
        keep = min(share, 1.0, room)
        if not f.summary:
            used[key] = used.get(key, 0.0) + keep
        if keep >= share - 1e-12:
            out.append(f)
            continue
        why = (f"the step is 100%: impact cut from {100 * share:.1f}% to {100 * keep:.1f}%"
               + (f", what the findings above leave of the step (their time overlaps this one's)" if keep < min(share, 1.0)
                  else ""))
        sev = f.severity
        if th is not None and sev in SEVERITIES:
            sev = max(sev, severity_for(keep, th), key=SEVERITIES.index)
        secs = f.impact_seconds * keep / share if f.impact_seconds is not None else None
        out.append(dataclasses.replace(f, impact_share=keep, impact_seconds=secs, severity=sev,  # type: ignore[type-var]
                                       evidence=f"{f.evidence} ({why})"))
    return out


def settle(findings: Iterable[R], th: Cutoffs | None = None) -> list[R]:
    """A report's findings under the one rule, ranked (:func:`rank_key`): time findings within
    the step (:func:`within_step`); a summary finding is ``low`` when a cause (a time finding
    that is not a summary) is reported beside it, else at most ``medium``."""
    found = within_step(findings, th)
    cause = any(not f.summary and f.impact_kind == "time" for f in found)
    cap = SEVERITIES.index("low" if cause else SUMMARY_CAP)
    out = [dataclasses.replace(f, severity=SEVERITIES[cap])  # type: ignore[type-var]
           if f.summary and f.severity in SEVERITIES and SEVERITIES.index(f.severity) < cap else f for f in found]
    return sorted(out, key=_key)
