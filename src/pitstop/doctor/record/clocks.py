"""Per-step clocks beside wall time, for measurements that hold on a busy machine.

Wall time of a step grows when other processes take the cores; the work the step does does
not. :class:`StepClocks` reads, at each step boundary:

- ``cpu_children``: CPU seconds of this process's child processes (DataLoader workers),
  from ``/proc/<pid>/task/*/schedstat`` (nanoseconds; the process's own CPU time is
  ``StepRecord.cpu``, ``time.process_time``);
- ``run_delay``: seconds the threads of this process and of its children were *runnable but
  waiting for a core* (the kernel's run-queue delay): the direct measure of contention;
- ``main_active``: seconds the main thread was running or runnable (the rest of the step it
  slept: waiting for a DataLoader worker, I/O, ``time.sleep``): a step whose main thread is
  mostly asleep is *wait-dominated*, and CPU time misses that wait;
- per thread of this process (not its children), the CPU time it got and the time it waited
  for a core over the step (:attr:`StepClocks.threads`, nanoseconds, keyed by thread id): how
  many threads did work and how long each waited is what PIT108 reads;
- on CUDA, ``gpu``: the time between CUDA events recorded at consecutive step boundaries
  (resolved once, after the run, by :meth:`StepClocks.resolve`: no per-step sync). Host wall
  time is polluted by a busy CPU; the device's own clock is not.

Linux only (``/proc``); elsewhere the fields stay ``None`` and decisions use wall time.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["StepClocks", "children_of", "schedstat"]


def schedstat(path: str) -> tuple[int, int] | None:
    """``(run_ns, wait_ns)`` from a ``schedstat`` file, or None."""
    try:
        with open(path, "rb") as f:
            parts = f.read().split()
        return int(parts[0]), int(parts[1])
    except (OSError, ValueError, IndexError):
        return None


def children_of(pid: int, tids: list[str] | None = None) -> list[int]:
    """Live child processes of ``pid`` (any of its threads' children; ``tids``: its threads,
    when already listed)."""
    out: list[int] = []
    if tids is None:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def _threads(pid: int, tids: list[str] | None = None) -> dict[str, tuple[int, int]]:
    out = {}
    if tids is None:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
    for tid in tids:
        s = schedstat(f"/proc/{pid}/task/{tid}/schedstat")
        if s is not None:
            out[f"{pid}/{tid}"] = s
    return out


class StepClocks:
    """Reads the clocks at step boundaries; :meth:`lap` returns one step's fields."""

    def __init__(self, cuda: bool = False) -> None:
        self.pid = os.getpid()
        self.available = os.path.exists(f"/proc/{self.pid}/task/{self.pid}/schedstat")
        self.cuda = cuda
        self._last: dict[str, tuple[int, int]] = {}
        self._main: tuple[int, int] | None = None
        self._events: list[Any] = []
        self._ends: list[int] = []  # per lap, in order: the index of its end event (-1: none)
        #: the last lap's (run_ns, wait_ns) per thread of this process (children excluded), by thread id
        self.threads: dict[str, tuple[int, int]] = {}

    def _read(self) -> tuple[dict[str, tuple[int, int]], tuple[int, int] | None]:
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")  # listed once for both reads
        except OSError:
            tids = []
        threads = _threads(self.pid, tids)
        for child in children_of(self.pid, tids):
            for key, s in _threads(child).items():
                threads["c" + key] = s
        return threads, threads.get(f"{self.pid}/{self.pid}")

    def mark(self) -> None:
        """Start of a step (or of the measured part of the run)."""
        if self.available:
            self._last, self._main = self._read()
        if self.cuda:
            self._event()

    def _event(self) -> int:
        import torch

        if not torch.cuda.is_initialized():
            return -1
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self._events.append(ev)
        return len(self._events) - 1

    def lap(self) -> dict[str, Any]:
        """Fields of the step that ends now (and the start of the next one)."""
        out: dict[str, Any] = {}
        if self.available:
            now, main = self._read()
            children = run_delay = 0
            own: dict[str, tuple[int, int]] = {}
            for key, (run, wait) in now.items():
                before = self._last.get(key, (0, 0) if key.startswith("c") else (run, wait))
                if key.startswith("c"):
                    children += max(0, run - before[0])
                else:
                    own[key] = (max(0, run - before[0]), max(0, wait - before[1]))
                run_delay += max(0, wait - before[1])
            self.threads = own
            out["cpu_children"] = children / 1e9
            out["run_delay"] = run_delay / 1e9
            if main is not None and self._main is not None:
                out["main_active"] = (main[0] - self._main[0] + main[1] - self._main[1]) / 1e9
            self._last, self._main = now, main
        if self.cuda:
            self._ends.append(self._event())
        return out

    def resolve(self, records: list[Any]) -> None:
        """Fill ``record.gpu`` (seconds between the CUDA events at its boundaries, one
        record per :meth:`lap`, in order) once, after the run: one synchronize, not one per
        step."""
        if not self._events:
            return
        import torch

        torch.cuda.synchronize()
        for rec, end in zip(records, self._ends):
            if end > 0:
                rec.gpu = self._events[end - 1].elapsed_time(self._events[end]) / 1e3
