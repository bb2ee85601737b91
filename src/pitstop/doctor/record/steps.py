"""The step clock: the plan of steps, the step in progress, and the records of the ended ones.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`. The plan is a list of
``(kind, count)`` segments (``warmup``, ``observed``, ``profiled``, ``traced``); the kind of
the step in progress is the segment its index falls into. ``bare`` steps (after the last
observed steps, alternating with them) and ``traced`` steps run *quiet*: every recorder but the
step boundaries returns at once there (:attr:`StepLog.quiet`), so that the bare steps time the
script without the doctor's hooks (its own overhead, measured in the same process) and the
traced steps give the profiler the program as it runs. The other recorders add their
phase seconds to :attr:`StepLog.cur` (a :class:`Step`) while the step runs; :meth:`close`
turns it into a :class:`~pitstop.doctor.run.spec.StepRecord`, with the per-step clocks of
:class:`~pitstop.doctor.record.clocks.StepClocks`. ``passive`` is the switch the step boundaries read:
True before :meth:`start`, after the planned steps (when the run is not stopped) and after
uninstalling; ``quiet`` the one the other hooks read (passive, or a bare or traced step).
"""

from __future__ import annotations

import time
from collections import Counter

import torch

from pitstop.doctor.record.clocks import StepClocks
from pitstop.doctor.run.spec import StepRecord

__all__ = ["Step", "StepLog", "StopDoctor", "plan_of", "QUIET_KINDS", "bare_pairs"]

#: step kinds in which only the step boundaries record (see the module docstring)
QUIET_KINDS = frozenset({"bare", "traced"})

perf = time.perf_counter
cpu_clock = time.process_time  # CPU seconds of the whole process (all threads)


class StopDoctor(BaseException):
    """Raised from the optimizer step hook once the planned steps are measured. A
    BaseException, so that a script's ``except Exception`` does not swallow it."""


class Step:
    """What the step in progress accumulated: seconds per phase, its losses, its backward calls."""

    __slots__ = ("phases", "losses", "backward_calls")

    def __init__(self) -> None:
        self.phases: Counter[str] = Counter()
        self.losses: list[torch.Tensor] = []
        self.backward_calls = 0


def bare_pairs(steps: int) -> int:
    """Observed steps followed by a bare step (full mode): up to 3, at most half of them."""
    return min(3, steps // 2)


def plan_of(steps: int, warmup: int, *, full: bool, traced: int) -> list[tuple[str, int]]:
    """The plan, as (kind, count) segments: warmup, observed (full mode: its last
    :func:`bare_pairs` steps each followed by a bare step), profiled (full mode), traced."""
    pairs = bare_pairs(steps) if full else 0
    return ([("warmup", warmup), ("observed", steps - pairs)] + [("observed", 1), ("bare", 1)] * pairs
            + [("profiled", 1 if full else 0), ("traced", traced if full else 0)])


class StepLog:
    """The step clock: which step runs now, what it accumulated, the records of the ended ones."""

    def __init__(self, plan: list[tuple[str, int]], *, cuda: bool = False) -> None:
        self.plan = plan
        self.total = sum(n for _, n in plan)
        self.steps = sum(n for kind, n in plan if kind == "observed")  # observed steps planned
        self.records: list[StepRecord] = []
        self.loss_tensors: list[list[torch.Tensor]] = []
        self.cur = Step()
        self._kind = self.kind(0)
        self.passive = True
        #: the hooks (all but the step boundaries) record nothing now: passive, or a quiet step
        self.quiet = True
        self.finished = False
        self.observed = 0
        self.clocks = StepClocks(cuda=cuda)
        self.step_start = perf()
        self.cpu_start = cpu_clock()

    @property
    def index(self) -> int:
        return len(self.records)

    def kind(self, i: int | None = None) -> str | None:
        """The kind of step ``i`` (default: the step in progress, kept at each step's start: the
        hooks ask it on every call)."""
        if i is None:
            return self._kind
        for kind, n in self.plan:
            if i < n:
                return kind
            i -= n
        return None

    def start(self) -> None:
        """The measured part of the run starts now."""
        self.passive = False
        self.quiet = self.kind() in QUIET_KINDS
        self.step_start = perf()
        self.cpu_start = cpu_clock()
        self.clocks.mark()

    def unaccounted(self) -> float:
        """Seconds of the current step so far that no measured phase explains."""
        measured = sum(v for k, v in self.cur.phases.items() if k != "sync")
        return perf() - self.step_start - measured

    def close(self) -> StepRecord:
        """The record of the step that ends now (not yet appended: see :meth:`append`)."""
        now, cpu_now = perf(), cpu_clock()
        cur = self.cur
        # the traced steps (the last ones) read no /proc clocks: the profiler would count that
        # bookkeeping, between two steps' marks, as the script's host time
        clocks = self.clocks.lap() if self._kind != "traced" else {}
        return StepRecord(index=self.index, kind=self._kind or "extra", wall=now - self.step_start,
                          cpu=cpu_now - self.cpu_start, phases=dict(cur.phases), backward_calls=cur.backward_calls,
                          batch_size=None, **clocks)

    def append(self, rec: StepRecord) -> None:
        """Keep ``rec`` and its losses; the next step starts now (``finished`` after the plan)."""
        self.records.append(rec)
        self._kind = self.kind(self.index)
        self.loss_tensors.append(self.cur.losses)
        if rec.kind == "observed":
            self.observed += 1
        self.cur = Step()
        if self.index >= self.total:
            self.finished = True
        self.quiet = self.passive or self.kind() in QUIET_KINDS
        self.step_start, self.cpu_start = perf(), cpu_clock()

    def pause(self) -> None:
        """Hooks stop measuring (after the planned steps, or when uninstalled)."""
        self.passive = True
        self.quiet = True

    def exclude(self, t0: float, c0: float) -> None:
        """Bookkeeping since ``(t0, c0)`` (perf, process time) is not the script's time."""
        self.step_start += perf() - t0
        self.cpu_start += cpu_clock() - c0

    def restart(self, t: float, c: float, phases: dict[str, float]) -> None:
        """The current step started at ``(t, c)`` with ``phases`` already spent before it
        (manual parameter updates found late): keep only what came after."""
        new = Step()
        for k, v in self.cur.phases.items():
            if v - phases.get(k, 0.0) > 0:
                new.phases[k] = v - phases.get(k, 0.0)
        self.cur, self.step_start, self.cpu_start = new, t, c

    def read_losses(self) -> None:
        """Copy the kept loss tensors to the host once (the only sync the losses cost)."""
        try:
            self.clocks.resolve(self.records)  # CUDA step times from events, same single sync
        except Exception:
            pass
        for rec, tensors in zip(self.records, self.loss_tensors):
            if tensors:
                try:
                    rec.loss = float(sum(float(t.float()) for t in tensors))
                except Exception:
                    rec.loss = None
        self.loss_tensors = [[] for _ in self.loss_tensors]
