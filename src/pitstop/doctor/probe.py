"""Doctor probes (face D): quick experiments a tip runs on this machine before it is recommended.

Torch-free on purpose (tip modules import this at catalog load time). A probe is one class
per tip, appended to its tip module next to its :class:`~pitstop.doctor.check.Check`::

    class PrecisionProbe(Probe, tip="PIT301"):
        name = "precision"                       # its key in Observations.probes

        def skip_reason(self, obs):              # decided on the plain observations
            if obs.forwards.get("autocast", {}).get("none", 0) == 0:
                return "training already runs under autocast"
            return None

        def run(self, ctx):                      # in the child; import torch here
            import torch
            model, batch = ctx.model_copy(), ctx.batch()
            yield self.name, ctx.compare(what=..., baseline="fp32", variants={
                "fp32": ctx.fwd_bwd(model, batch),
                "bfloat16": ctx.fwd_bwd(model, batch, autocast=torch.bfloat16)})

The mechanism (:mod:`pitstop.doctor.probes`) runs every registered probe in the child
after the script was stopped and the instrumentation removed, on copies (the user's
model, optimizer and RNG state are left untouched), and stores each result in
``Observations.probes``; the tip's check reads it there. :meth:`ProbeContext.compare
<pitstop.doctor.probes.ProbeContext.compare>` times the variants interleaved and returns
the standard result (median seconds per variant, the speed-up of the best candidate over
the baseline with a paired-bootstrap interval): gate on the interval's lower bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from pitstop.registry import Face

__all__ = ["Probe", "ProbeSkip", "probe_gain", "gain_text", "ESTIMATE_NOTE"]

#: appended to the evidence of findings whose impact comes from a probe.
ESTIMATE_NOTE = ("the impact is an estimate from a compute-only probe (no DataLoader workers competing, "
                 "nothing else of the step); `pitstop tune` measures it on the real loop")


class ProbeSkip(Exception):
    """Raised by a probe (or the context's helpers) when it cannot run here; the message
    is recorded as ``{"skipped": message}`` under the probe's name."""


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

    def run(self, ctx) -> Iterable[tuple[str, dict[str, Any]]]:
        """Yield ``(key, result)`` pairs (usually one, under :attr:`name`). Runs in the
        child with torch available; ``ctx`` is a :class:`pitstop.doctor.probes.ProbeContext`."""
        raise NotImplementedError


def probe_gain(result: dict[str, Any] | None, candidate: str | None = None) -> dict[str, Any] | None:
    """The speed-up of ``candidate`` (default: the probe's best candidate) over the
    baseline, as ``{"candidate", "ratio", "low", "high", "confidence", "runs"}``; None when
    the probe was skipped, crashed or did not run."""
    if not result or "speedups" not in result:
        return None
    name = candidate or result.get("candidate")
    s = result["speedups"].get(name)
    if s is None:
        return None
    return {"candidate": name, "ratio": s["ratio"], "low": s["low"], "high": s["high"],
            "confidence": result.get("confidence"), "runs": result.get("runs")}


def gain_text(g: dict[str, Any]) -> str:
    """``1.72x (90% interval 1.41x-2.05x over 12 rounds)``."""
    conf = f"{100 * g['confidence']:.0f}% " if g.get("confidence") else ""
    runs = f" over {g['runs']} rounds" if g.get("runs") else ""
    return f"{g['ratio']:.2f}x ({conf}interval {g['low']:.2f}x-{g['high']:.2f}x{runs})"
