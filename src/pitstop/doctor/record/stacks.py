"""Which source lines the main thread runs while a window is open (sampled Python stacks).

A daemon thread ticks every ``interval`` seconds while the sampler is not ``paused`` and, at a
tick that finds a window open (:meth:`StackSampler.open`), reads the main thread's current
frame (``sys._current_frames``); each sample counts for the innermost frame in the user's code
(not the standard library, site-packages, torch or the doctor). The ticks run on their own
clock, not from the window's opening: a window shorter than the interval is sampled in
proportion to its length (no bias towards window starts), and opening or closing a window
wakes nothing. Every tick takes the GIL from the main thread, so the interval (5 ms) bounds
the sampler's cost: a few ticks per small step (issue 39 measured the older 1 ms clock, which
also sampled at once at every opening, at +25% on the bundled MLP's 5 ms step on a loaded
2-core EPYC).
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
    def __init__(self, thread_id: int | None = None, interval: float = 0.005) -> None:
        self.interval = interval
        self.counts: Counter[tuple[str, str]] = Counter()  # (label, site) -> samples
        self.samples: Counter[str] = Counter()  # label -> samples
        #: what the open window is called now (e.g. "host" before the first forward, "other" after)
        self.label = "host"
        self._thread_id = thread_id  # None: the thread that calls start()
        self._main = thread_id if thread_id is not None else threading.get_ident()
        self.is_open = False  # a window is open (a plain attribute: the hooks set it on every phase change)
        self._ticking = threading.Event()  # not paused: the clock runs
        self._ticking.set()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: extra condition read at each sample (e.g. "not inside a DataLoader wait")
        self.skip = lambda: False

    @property
    def paused(self) -> bool:
        """No ticks while set (the doctor's quiet steps: its thread must not take the GIL there)."""
        return not self._ticking.is_set()

    @paused.setter
    def paused(self, value: bool) -> None:
        if value:
            self._ticking.clear()
            self.is_open = False
        else:
            self._ticking.set()

    def start(self) -> None:
        if self._thread_id is None:
            self._main = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="pitstop-doctor-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._ticking.set()

    def open(self) -> None:
        if self._ticking.is_set():
            self.is_open = True

    def close(self) -> None:
        self.is_open = False

    def _run(self) -> None:
        while not self._stop:
            self._ticking.wait()
            time.sleep(self.interval)
            if self._stop:
                return
            if not self.is_open or self.skip():
                continue
            frame = sys._current_frames().get(self._main)
            if frame is not None and self.is_open:
                site, label = user_frame(frame), self.label
                if site is not None:
                    self.samples[label] += 1
                    self.counts[(label, site)] += 1
            del frame

    def top(self, label: str, n: int = 5) -> list[tuple[str, float, int]]:
        """The ``n`` most sampled sites under ``label``: (site, share of its samples, samples)."""
        total = self.samples[label]
        if not total:
            return []
        rows = sorted(((site, c) for (lab, site), c in self.counts.items() if lab == label), key=lambda r: -r[1])
        return [(site, c / total, c) for site, c in rows[:n]]
