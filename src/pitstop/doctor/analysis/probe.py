"""Doctor probes (face D): quick experiments a tip runs on this machine before it is recommended.

Torch-free on purpose (tip modules import this at catalog load time). A probe is one class
per tip, appended to its tip module next to its :class:`~pitstop.doctor.analysis.check.Check`::

    class PrecisionProbe(Probe, tip="PIT301"):
        name = "precision"                       # its key in Observations.probes

        def skip_reason(self, obs):              # decided on the plain observations
            if obs.autocast_dtype is not None:
                return "training already runs under autocast"
            return None

        def run(self, ctx):                      # in the child; import torch here
            import torch
            model, batch = ctx.model_copy(), ctx.batch()
            yield self.name, ctx.compare(what=..., baseline="fp32", variants={
                "fp32": ctx.fwd_bwd(model, batch),
                "bfloat16": ctx.fwd_bwd(model, batch, autocast=torch.bfloat16)})

The mechanism (:mod:`pitstop.doctor.record.probing.run`) runs every registered probe in the child
after the script was stopped and the instrumentation removed, on copies (the user's
model, optimizer and RNG state are left untouched), and stores each result in
``Observations.probes``; the tip's check reads it there. :meth:`ProbeContext.compare
<pitstop.doctor.record.probing.run.ProbeContext.compare>` times the variants interleaved and returns
the standard result (median seconds per variant, the speed-up of the best candidate over
the baseline with a paired-bootstrap interval): gate on the interval's lower bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pitstop.doctor.analysis.probe_records import Gain, ProbeResult
from pitstop.catalog import Face

__all__ = ["Probe", "ProbeSkip", "probe_gain", "gain_text", "gate_note", "ESTIMATE_NOTE"]

#: appended to the evidence of findings whose impact comes from a probe.
ESTIMATE_NOTE = ("the impact is an estimate from a compute-only probe (no DataLoader workers competing, "
                 "nothing else of the step); `pitstop tune` measures it on the real loop")


class ProbeSkip(Exception):
    """Raised by a probe (or the context's helpers) when it cannot run here; the message
    is recorded as ``ProbeResult.skip(message)`` under the probe's name."""


class Probe(Face, face="D"):
    """Base of every doctor probe. Subclass with ``tip="PITnnn"`` in the tip's module.

    A probe measures; it never decides. Its tip's check reads the result from
    ``obs.probes[name]`` and decides whether the measured gain is worth a finding.
    """

    #: key of the result in ``Observations.probes``.
    name: ClassVar[str] = ""

    def skip_reason(self, obs) -> str | None:
        """Why the probe does not apply to this run (recorded), from the plain observations."""
        return None

    @classmethod
    def key(cls, index: int = 0) -> str:
        """The key of the result for the ``index``-th subject (optimizer, ...): :attr:`name`,
        then ``name1``, ``name2``, ... The probe and its check both call this."""
        return f"{cls.name}{index if index else ''}"

    def run(self, ctx) -> Iterable[tuple[str, ProbeResult]]:
        """Yield ``(key, result)`` pairs (usually one, under :attr:`name`). Runs in the
        child with torch available; ``ctx`` is a :class:`pitstop.doctor.record.probing.run.ProbeContext`."""
        raise NotImplementedError


def probe_gain(result: ProbeResult | None, candidate: str | None = None) -> Gain | None:
    """The speed-up of ``candidate`` (default: the probe's best candidate) over the
    baseline; None when the probe was skipped, crashed or did not run."""
    return result.gain(candidate) if result is not None else None


def gain_text(g: Gain) -> str:
    """``1.72x (90% interval 1.41x-2.05x over 12 rounds)``."""
    return g.text()


def gate_note(result: ProbeResult, threshold: float) -> str:
    """Why a probe that measured a gain produced no finding: the checks gate on the
    interval's lower bound (``Thresholds.probe_speedup``), not on the median ratio. Empty
    when that does not apply. :func:`pitstop.doctor.analysis.diagnosis.diagnose` keeps it in
    ``Diagnosis.probe_notes`` for the reports to print."""
    g = result.gain()
    if g is None or g.ratio <= 1.0 or g.low >= threshold:
        return ""
    conf = f"{100 * g.confidence:.0f}% " if g.confidence else ""
    return (f"no finding from this probe: its {conf}interval's lower bound {g.low:.2f}x is below the "
            f"{threshold:.2f}x a recommendation needs (the median {g.ratio:.2f}x alone is not enough on this "
            "machine's noise); `pitstop tune` measures it on the real loop")
