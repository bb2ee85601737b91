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

Over the observed steps it also keeps what the cores did (:class:`CoreWindow`): the CPU time
and the wait for a core of each thread of the process (summed from the per-step clocks of the
observed steps), and the machine's busy CPU time from ``/proc/stat`` at the two ends of the
first run of observed steps (up to the first bare step), so that the CPU other processes used
meanwhile is measured rather than guessed from the load average.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import torch

from pitstop.doctor.record.clocks import StepClocks
from pitstop.doctor.run.spec import StepRecord

__all__ = ["Step", "StepLog", "StopDoctor", "plan_of", "QUIET_KINDS", "bare_pairs", "CoreWindow"]

#: step kinds in which only the step boundaries record (see the module docstring)
QUIET_KINDS = frozenset({"bare", "traced"})

perf = time.perf_counter
cpu_clock = time.process_time  # CPU seconds of the whole process (all threads)


class StopDoctor(BaseException):
    """Raised from the optimizer step hook once the planned steps are measured. A
    BaseException, so that a script's ``except Exception`` does not swallow it."""


class Step:
    """What the step in progress accumulated: seconds per phase, its losses, its backward calls."""

    __slots__ = ("phases", "losses", "backward_calls", "eval_span", "eval_forward")

    def __init__(self) -> None:
        self.phases: Counter[str] = Counter()
        self.losses: list[torch.Tensor] = []
        self.backward_calls = 0
        self.eval_span: list[float] | None = None  # [start, end] of its evaluation (forwards and loader waits)
        self.eval_forward = False  # an evaluation forward ran in it


class CoreWindow:
    """The cores over the observed steps: ``threads`` (thread id -> [CPU ns, wait ns] of this
    process's own threads), ``start`` / ``end`` (machine counters and the process's clocks at
    the window's two ends: :func:`pitstop.doctor.record.cores.window_mark`)."""

    __slots__ = ("threads", "start", "end")

    def __init__(self) -> None:
        self.threads: dict[str, list[int]] = {}
        self.start: dict | None = None
        self.end: dict | None = None

    def add(self, lap: dict[str, tuple[int, int]]) -> None:
        for key, (run, wait) in lap.items():
            t = self.threads.setdefault(key, [0, 0])
            t[0] += run
            t[1] += wait


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
        self.cores = CoreWindow()
        #: called when a step's first evaluation forward or loader wait ends (where it runs is read then)
        self.on_eval: Callable[[], None] | None = None
        #: the evaluations of every step, warm-up included: (record index, kind, wall seconds from
        #: its first evaluation forward or loader wait to its last, seconds in them)
        self.evals: list[tuple[int, str, float, float]] = []

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
        self._window_edge()

    def _window_edge(self) -> None:
        """Mark the observed window's start (the next step is observed and the last was not)
        or its end (the step that just ended was the last observed one)."""
        from pitstop.doctor.record.cores import window_mark

        now, last = self.kind(), (self.records[-1].kind if self.records else None)
        if now == "observed" and last != "observed" and self.cores.start is None:
            self.cores.start = window_mark()
        elif last == "observed" and now != "observed" and self.cores.end is None:
            self.cores.end = window_mark()

    def eval_mark(self, t0: float, t1: float, forward: bool = False) -> None:
        """An evaluation forward (``forward``) or loader wait of the current step ran from ``t0``
        to ``t1``. ``on_eval`` is told at the step's first one, and again at its first forward
        (the model call names the evaluation better than the loader it reads)."""
        cur, span = self.cur, self.cur.eval_span
        if span is None:
            cur.eval_span = [t0, t1]
        else:
            span[0], span[1] = min(span[0], t0), max(span[1], t1)
        if self.on_eval is not None and (span is None or (forward and not cur.eval_forward)):
            self.on_eval()
        cur.eval_forward = cur.eval_forward or forward

    def unaccounted(self) -> float:
        """Seconds of the current step so far that no measured phase explains."""
        measured = sum(v for k, v in self.cur.phases.items() if k != "sync")
        return perf() - self.step_start - measured

    def close(self) -> StepRecord:
        """The record of the step that ends now (not yet appended: see :meth:`append`)."""
        now, cpu_now = perf(), cpu_clock()
        cur = self.cur
        kind = self._kind or "extra"
        # the traced steps (the last ones) read no /proc clocks: the profiler would count that
        # bookkeeping, between two steps' marks, as the script's host time
        lap = self.clocks.lap() if kind != "traced" else {}
        if kind == "observed":
            self.cores.add(self.clocks.threads)
        if cur.eval_span is not None:
            self.evals.append((self.index, kind, cur.eval_span[1] - cur.eval_span[0], cur.phases.get("eval", 0.0)))
        return StepRecord(index=self.index, kind=kind, wall=now - self.step_start,
                          cpu=cpu_now - self.cpu_start, phases=dict(cur.phases), backward_calls=cur.backward_calls,
                          batch_size=None, **lap)

    def append(self, rec: StepRecord) -> None:
        """Keep ``rec`` and its losses; the next step starts now (``finished`` after the plan)."""
        self.records.append(rec)
        self._kind = self.kind(self.index)
        self.loss_tensors.append(self.cur.losses)
        if rec.kind == "observed":
            self.observed += 1
        self.cur = Step()
        if not self.passive:
            self._window_edge()
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
