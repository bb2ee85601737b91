"""The one severity ranking of findings (doctor, trace, compare; torch-free).

Time and memory findings take their severity from the share of the step (or of peak memory)
a fix saves: at least ``high_share`` is high, at least ``medium_share`` medium, else low
(the doctor's :class:`~pitstop.doctor.analysis.check.Thresholds` and the trace's
:class:`~pitstop.trace.thresholds.TraceThresholds` both carry the two cut-offs). Findings are
ranked by severity, then by that share, then by code.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SEVERITIES", "severity_for", "rank_key", "Cutoffs"]

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


def rank_key(severity: str, share: float | None, code: str) -> tuple[int, float, str]:
    """The sort key of a finding: severity, then the larger share first, then the code."""
    return (SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES), -(share or 0.0), code)
