"""Does the doctor report the program the user runs, in the user's seconds? (torch-free)

Three comparisons, all in one process's own measurements:

- **the program**: a script that compiles makes the same compiled calls and CUDA graph replays
  per step with the doctor's hooks on (observed steps) as with them off (the bare steps), and
  its profiled window shows them too (``RankResult.compiled``). When they differ, the doctor's
  instrumentation changed the program it measures: :attr:`Fidelity.changed` says how, the
  report prints it and every time finding drops a severity level (lowered confidence).
- **the seconds**: a GPU finding's share is of the *profiled* step; the profiler's own cost
  (host time per operator, which a launch-bound GPU idles through) makes profiled steps slower
  than observed ones. :class:`Fidelity` re-bases them on the observed step: GPU work (kernels,
  copies) keeps its seconds; GPU *idle* is scaled by the observed step's idle over the
  profiled step's idle (the profiler's extra time is idle GPU time), so the idle findings
  together never claim more idle than the observed step has. Past ``DISTORTED`` (1.5x) the
  GPU section says so and the GPU-derived severities drop a level.
- **the hooks' own cost**: ``Observations.overhead`` (observed against bare steps), stated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pitstop.severity import SEVERITIES

if TYPE_CHECKING:
    from pitstop.doctor.analysis.compile_records import CompileRecord
    from pitstop.doctor.analysis.observations import Observations
    from pitstop.findings import Finding
    from pitstop.trace.result import RankResult

F = TypeVar("F", bound="Finding")

__all__ = ["Fidelity", "fidelity_of", "program_changes", "lower", "lowered", "step_seconds", "DISTORTED"]

#: profiled steps this many times slower than observed ones are a distorted window
DISTORTED = 1.5


def lower(severity: str) -> str:
    """One level less severe (``low`` stays ``low``)."""
    if severity not in SEVERITIES:
        return severity
    return SEVERITIES[min(SEVERITIES.index(severity) + 1, len(SEVERITIES) - 1)]


@dataclass(frozen=True)
class Fidelity:
    """The profiled window against the observed step. ``profiled`` / ``observed``: seconds per
    step (the window's own steps; the observed steps' median), ``busy``: GPU busy seconds per
    profiled step; ``changed``: how the doctor's instrumentation changed the program (empty:
    it did not, as far as the counts tell)."""

    profiled: float | None = None
    observed: float | None = None
    busy: float | None = None
    changed: tuple[str, ...] = ()

    @property
    def distortion(self) -> float | None:
        """Profiled step over observed step (None: either unknown)."""
        if not self.profiled or not self.observed:
            return None
        return self.profiled / self.observed

    @property
    def distorted(self) -> bool:
        d = self.distortion
        return d is not None and d > DISTORTED

    @property
    def idle_scale(self) -> float:
        """The observed step's GPU idle over the profiled step's (at most 1: idle is never invented)."""
        p, o, b = self.profiled, self.observed, self.busy or 0.0
        if not p or not o or p <= b:
            return 1.0
        return max(0.0, min(1.0, (o - b) / (p - b)))

    def seconds(self, share: float, basis: str) -> float | None:
        """Seconds per observed step behind a window ``share`` of ``basis`` ``"idle"`` or ``"gpu"``."""
        if not self.profiled:
            return None
        s = share * self.profiled
        return s * self.idle_scale if basis == "idle" else s

    def share(self, share: float, basis: str) -> float:
        """A window ``share`` as a share of the observed step (at most the whole step)."""
        s = self.seconds(share, basis)
        if s is None or not self.observed:
            return min(share, 1.0)
        return min(s / self.observed, 1.0)

    def note(self) -> str | None:
        """What the report prints beside the GPU section (None: nothing to say)."""
        parts = list(self.changed)
        d = self.distortion
        if d is not None and self.distorted:
            parts.append(f"the profiled steps took {d:.1f}x the observed step ({1e3 * self.profiled:.2f} ms against "
                         f"{1e3 * self.observed:.2f} ms): the profiler's own cost; the GPU idle shares are re-based on "
                         f"the observed step (scaled by {self.idle_scale:.2f}) and the GPU findings lowered a level")
        return "; ".join(parts) or None


def program_changes(compile_rec: CompileRecord | None, rank: RankResult | None) -> tuple[str, ...]:
    """How the instrumentation changed a compiled program (see the module docstring): the
    compile record of the observed steps against the profiled window ``rank``."""
    out: list[str] = []
    c = compile_rec
    if c is None or not c.compiled:
        return ()
    for what, on, off in (("compiled calls", c.paired_calls_per_step, c.bare_calls_per_step),
                          ("CUDA graph replays", c.paired_replays_per_step, c.bare_replays_per_step)):
        if on is not None and off is not None and abs(on - off) >= 0.5:
            out.append(f"the doctor's hooks changed the program: {on:.1f} {what} per observed step against "
                       f"{off:.1f} without them (the steps alternating, nothing compiled in them)")
    w = rank.compiled if rank is not None else None
    if w is not None:  # the latest steady observed steps (the pairs), else all of them
        calls = c.paired_calls_per_step if c.paired_calls_per_step is not None else c.calls_per_step
        replays = c.paired_replays_per_step if c.paired_replays_per_step is not None else c.replays_per_step
        for what, live, seen in (("compiled graph runs", calls, w.graphs_per_step),
                                 ("CUDA graph replays", replays, w.graph_launches_per_step)):
            if live and abs(live - seen) >= 0.5:
                out.append(f"the profiled window ran another program: {seen:.1f} {what} per step there against "
                           f"{live:.1f} in the observed steps, so its GPU findings describe that program")
    return tuple(out)


def step_seconds(rank: RankResult) -> float | None:
    """Seconds per profiled step of a :class:`~pitstop.trace.result.RankResult` (the window over
    its steps), None without steps."""
    return rank.window.seconds / rank.steps if rank.window is not None and rank.steps else None


def fidelity_of(obs: Observations) -> Fidelity:
    """The :class:`Fidelity` of one run's ``Observations``."""
    rank = obs.gpu
    changed = program_changes(obs.compile, rank)
    if rank is None or rank.gpu is None:
        return Fidelity(changed=changed)
    profiled = step_seconds(rank)
    busy = rank.gpu.busy_seconds / rank.steps if rank.steps else None
    observed = obs.step_time.median if obs.step_time is not None else None
    return Fidelity(profiled=profiled, observed=observed, busy=busy, changed=changed)


def lowered(finding: F, why: str) -> F:
    """``finding`` a severity level lower, ``why`` appended to its evidence."""
    sev = lower(finding.severity)
    if sev == finding.severity:
        return finding
    return dataclasses.replace(finding, severity=sev, evidence=f"{finding.evidence} ({why}: severity lowered a level)")
