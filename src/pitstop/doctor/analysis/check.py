"""Doctor checks (face D): the base class tip modules subclass, findings and thresholds.

Torch-free on purpose: tip modules import this at catalog load time, and checks run in the
parent process on the JSON :class:`~pitstop.doctor.analysis.observations.Observations` the child
wrote. A check is one class per tip, appended to its tip module::

    class DataWaitCheck(Check, tip="PIT101"):
        def check(self, obs, th):
            if obs.share("data") > th.data_wait_share:
                yield self.finding(...)

``requires = "cuda"`` makes the mechanism skip the check on other devices and say why;
``requires = "compiled"`` skips it when the run compiled nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import ClassVar

from pitstop.doctor.analysis.observations import Observations
from pitstop.catalog import Face
from pitstop.findings import Finding
from pitstop.thresholds import Thresholds
from pitstop.severity import SEVERITIES, severity_for
from pitstop.units import mib, ms, pct, short_where

__all__ = ["Check", "Finding", "in_framework_terms", "Thresholds", "SEVERITIES", "severity_for", "pct", "ms", "mib", "short_where"]

# Severities (:mod:`pitstop.severity`, the one ranking), most urgent first. Time and memory
# findings take theirs from the estimated share a fix saves (:func:`severity_for`: >= ``high_share`` high, >=
# ``medium_share`` medium, else low; memory is low unless memory is under pressure; an
# impact that is only an upper bound may be lowered by its check, with the reason in the
# evidence). ``correctness`` findings (no share): ``high`` when results are wrong (the
# model trains or evaluates incorrectly), ``medium`` when the settings leave
# reproducibility unclear on the device at hand, ``low`` for a degraded, wasteful or
# deprecated but not wrong result.


class Check(Face, face="D"):
    """Base of every doctor check. Subclass with ``tip="PITnnn"`` in the tip's module.

    Override :meth:`check` (a generator of findings); optionally :meth:`skip_reason` to
    say why the check cannot apply to this run. ``requires = "cuda"`` skips on CPU,
    ``requires = "compiled"`` when nothing was ``torch.compile``'d.
    """

    requires: ClassVar[str] = "any"
    #: ``"rank"``: reads one process's observations (run on each rank of a torchrun job, the
    #: findings merged); ``"job"``: reads the merged ranks (``obs.distributed``), run once.
    scope: ClassVar[str] = "rank"
    #: what the check looks at, shown when it is skipped or finds nothing.
    looks_at: ClassVar[str] = ""
    #: the fix in a training framework's own options, by framework name ("lightning",
    #: "fabric", "transformers", "accelerate"): when the script runs under one, the
    #: mechanism puts its fix first and keeps the plain-PyTorch one after it
    #: (:func:`in_framework_terms`). Leave a framework out where the user's own PyTorch
    #: code is the lever (Fabric and Accelerate loops are the user's).
    framework_fixes: ClassVar[dict[str, str]] = {}
    #: on a GPU run whose profiled window was analysed (``obs.gpu``, the trace analysis of
    #: :mod:`pitstop.trace`), who decides this code: ``"both"`` (default: the check and the
    #: tip's trace check each may find it, one finding carries both evidences, the GPU
    #: impact first), ``"trace"`` (the check judged the GPU by host timers: its finding stands
    #: only when the trace check of its tip found the cost, and takes the trace's impact) or
    #: ``"live"`` (a live measurement such as a probe decides; the trace adds its evidence).
    gpu_role: ClassVar[str] = "both"
    #: True for a check whose findings summarise lost time without naming a change (PIT905):
    #: they never outrank a cause (:func:`pitstop.severity.settle`)
    summary: ClassVar[bool] = False
    #: the code of another tip whose finding claims the same time with another fix: when both
    #: are found, this one becomes an option of that one (:func:`pitstop.findings.one_claim`)
    same_cost_as: ClassVar[str | None] = None

    def framework_fix(self, framework: str, finding: Finding, obs: Observations) -> str | None:
        """The fix for ``finding`` in ``framework``'s terms, or None (plain PyTorch only)."""
        return self.framework_fixes.get(framework)

    def role(self, obs: Observations) -> str:
        """:attr:`gpu_role` for this run (a check whose live measurement may be missing, such as
        a probe that did not run, lets the trace decide without it)."""
        return self.gpu_role

    def skip_reason(self, obs: Observations) -> str | None:
        if self.requires == "cuda" and not obs.on_cuda:
            return f"needs a CUDA device (this run trained on {obs.device})"
        if self.requires == "compiled" and not obs.compiled:
            return "nothing is torch.compile'd in this run"
        return None

    def check(self, obs: Observations, th: Thresholds) -> Iterable[Finding]:
        raise NotImplementedError

    # -- helpers for subclasses ------------------------------------------------------
    def finding(self, th: Thresholds, *, title: str, evidence: str, fix: str,
                share: float | None = None, kind: str = "time", seconds: float | None = None,
                nbytes: int | None = None, severity: str | None = None,
                where: Iterable[str] = ()) -> Finding:
        if severity is None:
            severity = severity_for(share, th)
        if severity not in SEVERITIES:
            raise ValueError(f"{type(self).__name__}: unknown severity {severity!r}")
        fix = fix.rstrip() + f" (`pitstop explain {self.tip}`)"
        return Finding(code=self.tip, title=title, evidence=evidence, fix=fix, severity=severity,
                       impact_kind=kind, impact_share=share, impact_seconds=seconds,
                       impact_bytes=nbytes, where=tuple(where), summary=self.summary)


def in_framework_terms(check: Check, finding: Finding, obs: Observations) -> Finding:
    """``finding`` with its fix phrased in the detected framework's option first."""
    name = obs.framework_name
    fw = check.framework_fix(name, finding, obs) if name else None
    if not fw:
        return finding
    label = (obs.framework.label if obs.framework else None) or name
    return dataclasses.replace(finding, fix=f"{label}: {fw}; in plain PyTorch: {finding.fix}")
