"""The child's memory trail for the parent: resident memory sampled every 0.1 s (Linux).

A daemon thread started by the child bootstrap (both modes) reads ``/proc/self/statm`` every
:data:`PERIOD_S` and keeps the last :data:`KEEP` samples (monotonic time, RSS, step, phase);
every :data:`WRITE_S` (or at once when memory grew by a tenth since the last write) it
rewrites ``RESULT.json.rss`` atomically. If the kernel kills the process, that file is what
the parent reads (``doctor/run/oomkill.py``). Cost: one small file read per 0.1 s and one small
file write per half second, off the training thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from pitstop.doctor.record.memory import rss_bytes
from pitstop.doctor.run.oomkill import RSS_SUFFIX

__all__ = ["RssWatch", "PERIOD_S", "WRITE_S", "KEEP"]

PERIOD_S = 0.1
WRITE_S = 0.5
KEEP = 64


class RssWatch:
    """The sampling thread (see the module docstring); :meth:`stop` ends it."""

    def __init__(self, result_path: str, inst: Any, capacity: int | None) -> None:
        self.path = result_path + RSS_SUFFIX
        self.inst, self.capacity = inst, capacity
        self.samples: deque = deque(maxlen=KEEP)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pitstop-doctor-rss", daemon=True)

    def start(self) -> RssWatch:
        if rss_bytes() is not None:
            self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()

    def _phase(self) -> str:
        inst = self.inst
        watch = getattr(inst.memory, "watch", None) if inst.full else None
        if watch is not None:
            return watch.phase()
        b = inst.bounds
        return "backward" if b.in_backward else "optimizer" if b.in_opt else ""

    def _run(self) -> None:
        from pitstop.atomic import write_atomic

        written, last = 0.0, 0
        while not self.done.wait(PERIOD_S):
            rss = rss_bytes()
            if rss is None:
                return
            now = time.monotonic()
            try:
                self.samples.append((now, rss, self.inst.log.index, self._phase()))
            except Exception:
                continue
            if now - written >= WRITE_S or rss > last * 1.1:
                try:
                    write_atomic(self.path, json.dumps({"samples": list(self.samples), "capacity": self.capacity}),
                                 durable=False)
                    written, last = now, rss
                except (OSError, ValueError):
                    pass
