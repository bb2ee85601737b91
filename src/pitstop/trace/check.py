"""Trace checks (face T): the base class tip modules subclass (torch-free).

A check reads one rank's typed :class:`~pitstop.trace.result.RankResult` (or the whole job
for :meth:`TraceCheck.check_job`) and yields :class:`~pitstop.findings.Finding`s;
it decides, the analyzers only measure. One class per tip, appended to its tip module::

    class InputBoundTrace(TraceCheck, tip="PIT101"):
        def check(self, rank, th):
            if rank.dataloader.share and rank.dataloader.share > th.input_share:
                yield self.finding(th, rank, title=..., evidence=..., fix=..., impact=rank.dataloader.share)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pitstop.catalog import Face
from pitstop.severity import severity_for
from pitstop.units import ms, pct
from pitstop.findings import Finding
from pitstop.thresholds import Thresholds
from pitstop.trace.result import RankResult

__all__ = ["TraceCheck", "JobView", "pct", "ms"]


class JobView:
    """The ranks of one job and the stragglers found among them (read-only); ``straggle``:
    the straggler model's whole answer (:class:`pitstop.ranks.StraggleAnalysis`, or None)."""

    def __init__(self, ranks: tuple[RankResult, ...], stragglers: tuple, spread: float | None,
                 straggle: object | None = None) -> None:
        self.ranks = ranks
        self.stragglers = stragglers
        self.spread = spread
        self.straggle = straggle


class TraceCheck(Face, face="T"):
    """Base of every trace check. Subclass with ``tip="PITnnn"`` in the tip's module and
    override :meth:`check` (per rank) and/or :meth:`check_job` (across ranks)."""

    #: what the check looks at (docs and ``pitstop explain --where``).
    looks_at: ClassVar[str] = ""
    #: True for a check whose findings summarise lost time without naming a change (PIT905):
    #: they never outrank a cause (:func:`pitstop.severity.settle`)
    summary: ClassVar[bool] = False
    #: what the impact is a share of the step *of*: ``"gpu"`` (GPU work: kernels, copies, whose
    #: seconds the profiler leaves as they are) or ``"idle"`` (GPU idle time, which the
    #: profiler's own host cost inflates: the doctor re-bases it on its observed step)
    impact_basis: ClassVar[str] = "gpu"
    #: the code of another tip whose finding claims the same time with another fix (PIT304's TF32
    #: and PIT301's bf16 on the same fp32 GEMMs): when both are found, this one becomes an option
    #: of that one (:func:`pitstop.findings.one_claim`)
    same_cost_as: ClassVar[str | None] = None

    def check(self, rank: RankResult, th: Thresholds) -> Iterable[Finding]:
        return ()

    def check_job(self, job: JobView, th: Thresholds) -> Iterable[Finding]:
        return ()

    def finding(self, th: Thresholds, rank: RankResult | None, *, title: str, evidence: str, fix: str,
                impact: float | None, severity: str | None = None) -> Finding:
        return Finding(code=self.tip, title=title, severity=severity or severity_for(impact, th),
                       impact_share=impact, evidence=evidence,
                       fix=fix.rstrip() + f" (`pitstop explain {self.tip}`)",
                       rank=rank.rank if rank is not None else None, summary=self.summary)
