"""Which source lines the main thread runs while a window is open (sampled Python stacks).

A daemon thread wakes only while :meth:`StackSampler.open` is in effect and reads the
main thread's current frame every ``interval`` seconds (``sys._current_frames``); each
sample counts for the innermost frame in the user's code (not the standard library,
site-packages, torch or the doctor). Cheap: nothing runs while the window is closed, and
a sample is a dict lookup and a short frame walk.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
from collections import Counter

__all__ = ["StackSampler", "user_frame"]

_DOCTOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d) + (_DOCTOR_DIR,)


_LIBS = _library_dirs()


def user_frame(frame) -> str | None:
    """``"file:line"`` of the innermost frame of user code in the stack ending at ``frame``;
    None while the doctor's own code runs (its hooks are not the user's time)."""
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(_DOCTOR_DIR):
            return None
        if not fn.startswith("<") and not os.path.abspath(fn).startswith(_LIBS):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


class StackSampler:
    def __init__(self, thread_id: int | None = None, interval: float = 0.001) -> None:
        self.interval = interval
        self.counts: Counter[tuple[str, str]] = Counter()  # (label, site) -> samples
        self.samples: Counter[str] = Counter()  # label -> samples
        #: what the open window is called now (e.g. "host" before the first forward, "other" after)
        self.label = "host"
        self._thread_id = thread_id  # None: the thread that calls start()
        self._main = thread_id if thread_id is not None else threading.get_ident()
        self._open = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: extra condition read at each sample (e.g. "not inside a DataLoader wait")
        self.skip = lambda: False
        #: no sampling while set (the doctor's profiled GPU steps: its thread must not take the GIL there)
        self.paused = False

    def start(self) -> None:
        if self._thread_id is None:
            self._main = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="pitstop-doctor-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._open.set()

    def open(self) -> None:
        if not self.paused:
            self._open.set()

    def close(self) -> None:
        self._open.clear()

    def _run(self) -> None:
        while not self._stop:
            self._open.wait()
            if self._stop:
                return
            frame = sys._current_frames().get(self._main)
            if frame is not None and self._open.is_set() and not self.skip():
                site, label = user_frame(frame), self.label
                if site is not None:
                    self.samples[label] += 1
                    self.counts[(label, site)] += 1
            del frame
            self._open.wait()
            time.sleep(self.interval)

    def top(self, label: str, n: int = 5) -> list[tuple[str, float, int]]:
        """The ``n`` most sampled sites under ``label``: (site, share of its samples, samples)."""
        total = self.samples[label]
        if not total:
            return []
        rows = sorted(((site, c) for (lab, site), c in self.counts.items() if lab == label), key=lambda r: -r[1])
        return [(site, c / total, c) for site, c in rows[:n]]
