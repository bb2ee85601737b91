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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol, TypeVar

__all__ = ["SEVERITIES", "severity_for", "rank_key", "settle", "Cutoffs", "Ranked"]

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
    code: str
    summary: bool


R = TypeVar("R", bound=Ranked)

#: the most a summary finding can be when no cause is found
SUMMARY_CAP = "medium"


def settle(findings: Iterable[R]) -> list[R]:
    """A report's findings under the one rule, ranked (:func:`rank_key`): a summary finding is
    ``low`` when a cause (a time finding that is not a summary) is reported beside it, else at
    most ``medium``."""
    found = list(findings)
    cause = any(not f.summary and f.impact_kind == "time" for f in found)
    cap = SEVERITIES.index("low" if cause else SUMMARY_CAP)
    out = [dataclasses.replace(f, severity=SEVERITIES[cap])  # type: ignore[type-var]
           if f.summary and f.severity in SEVERITIES and SEVERITIES.index(f.severity) < cap else f for f in found]
    return sorted(out, key=lambda f: rank_key(f.severity, f.impact_share, f.code, f.summary, f.impact_kind))
