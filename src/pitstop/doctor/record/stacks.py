"""Which source lines the main thread runs while a window is open (sampled Python stacks).

A daemon thread ticks every ``interval`` seconds while the sampler is not ``paused`` and, at a
tick that finds a window open (:meth:`StackSampler.open`), reads the main thread's current
frame (``sys._current_frames``); each sample counts for one *site*: the innermost frame of the
user's code, or, when that line is a framework call that runs the training loop itself
(``trainer.train()``, a Fabric or Accelerate loop, a runner of the user's own outside their
project), the deepest frame below it that explains the cost (library frames included), with the
user's line as ``via``. The ticks run on their own clock, not from the window's opening: a
window shorter than the interval is sampled in proportion to its length (no bias towards window
starts), and opening or closing a window wakes nothing (but a parked clock, below). Every tick takes the GIL from the main
thread, so the interval (5 ms) bounds the sampler's cost: a few ticks per small step (issue 39
measured the older 1 ms clock, which also sampled at once at every opening, at +25% on the
bundled MLP's 5 ms step on a loaded 2-core EPYC).

A window closed at two ticks in a row (a forward, a backward or an optimizer step of 5 ms or
more) *parks* the clock: the thread waits, with no ticks, until a window opens, then resumes at
a random phase (uniform within one interval, from a generator of its own: the script's
``random`` state is not touched), so the ticks inside a window stay spread evenly over it. The
ticks of a free-running clock during long compute phases found nothing to sample, yet each took
the GIL and woke a thread that competes with torch's intra-op threads for the cores. With the
doctor's windows (closed while the step computes), 2 torch threads on the 2-core EPYC: 1763
ticks in 45 CNN steps free-running, 108 parked (TinyGPT: 494 -> 108); the wall cost was within
the noise either way in that run (``benchmarks/doctor_overhead.py --sampler``,
docs/guide/doctor.md).

*The user's code* is a file outside the standard library, site-packages and the doctor, under
the project: the directory of the script being run (``__main__``) or the working directory.
A *framework call* is learnt at the first optimizer step (:meth:`StackSampler.learn_loop`): the
user's line from which the step was reached through library frames other than torch's.
"""

from __future__ import annotations

import os
import random
import sys
import sysconfig
import threading
import time
from collections import Counter

__all__ = ["StackSampler", "Sites", "timeout_position"]

_DOCTOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d) + (_DOCTOR_DIR,)


def _dirs(*keys: str) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.abspath(d) + os.sep for d in {paths.get(k) for k in keys} if d)


def _torch_dir() -> str | None:
    torch = sys.modules.get("torch")
    f = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) + os.sep if f else None


class Sites:
    """Says, for a frame, which site a sample of it counts for (see the module docstring)."""

    def __init__(self) -> None:
        self.libs = _library_dirs()
        self.std = _dirs("stdlib", "platstdlib")  # in a virtual environment platstdlib holds site-packages
        self.site_packages = _dirs("purelib", "platlib")
        self.torch = _torch_dir()
        #: the user's lines that run the training loop inside a library ("file:line")
        self.loop_calls: set[str] = set()
        self._roots: tuple[str, tuple[str, ...]] | None = None  # (__main__ file, project roots)
        self._paths: dict[str, str] = {}

    def _abs(self, fn: str) -> str:
        p = self._paths.get(fn)
        if p is None:
            p = self._paths[fn] = os.path.abspath(fn)
        return p

    def roots(self) -> tuple[str, ...]:
        main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
        if self._roots is None or self._roots[0] != main:
            dirs = {os.getcwd()} | ({os.path.dirname(os.path.abspath(main))} if main else set())
            self._roots = (main, tuple(os.path.join(d, "") for d in dirs))
        return self._roots[1]

    def is_user(self, fn: str) -> bool:
        if fn.startswith("<"):
            return False
        p = self._abs(fn)
        return not p.startswith(self.libs) and p.startswith(self.roots())

    def explains(self, fn: str) -> bool:
        """A frame worth naming as the cost's place: Python code that is not torch's, the
        standard library's or the doctor's (user code and other libraries alike)."""
        if fn.startswith("<"):
            return False
        p = self._abs(fn)
        if self.torch is None:
            self.torch = _torch_dir()
        std = p.startswith(self.std) and not p.startswith(self.site_packages)
        return not (p.startswith(_DOCTOR_DIR) or std or (self.torch and p.startswith(self.torch)))

    def site(self, frame) -> tuple[str, str | None] | None:
        """``(where, via)`` for a sample of the stack ending at ``frame``; None while the
        doctor's own code runs (its hooks are not the user's time) or no user frame is on it."""
        f, deep = frame, None
        while f is not None:
            fn = f.f_code.co_filename
            if fn.startswith(_DOCTOR_DIR):
                return None
            if self.is_user(fn):
                here = f"{fn}:{f.f_lineno}"
                if here in self.loop_calls and deep is not None:
                    return deep, here
                return here, None
            if deep is None and self.explains(fn):
                deep = f"{fn}:{f.f_lineno}"
            f = f.f_back
        return None

    def learn_loop(self, frame) -> None:
        """At the first optimizer step (``frame``: where the step hook runs): when library
        frames other than torch's lie between it and the user's code, the user's line there
        runs the loop inside a library."""
        f, through = frame, False
        while f is not None:
            fn = f.f_code.co_filename
            if not fn.startswith(_DOCTOR_DIR):
                if self.is_user(fn):
                    if through:
                        self.loop_calls.add(f"{fn}:{f.f_lineno}")
                    return
                if self.explains(fn):
                    through = True
            f = f.f_back


class StackSampler:
    def __init__(self, thread_id: int | None = None, interval: float = 0.005) -> None:
        self.interval = interval
        self.sites = Sites()
        self.counts: Counter[tuple[str, str]] = Counter()  # (label, site) -> samples
        self.samples: Counter[str] = Counter()  # label -> samples
        self.via: dict[str, str] = {}  # site -> the user's line that leads there (framework calls)
        #: what the open window is called now (e.g. "host" before the first forward, "other" after)
        self.label = "host"
        self._thread_id = thread_id  # None: the thread that calls start()
        self._main = thread_id if thread_id is not None else threading.get_ident()
        self.is_open = False  # a window is open (a plain attribute: the hooks set it on every phase change)
        self._ticking = threading.Event()  # not paused: the clock runs
        self._ticking.set()
        self._opened = threading.Event()  # set by open() while the clock is parked (module docs)
        self._parked = False
        self._phase = random.Random()  # the phase after parking; never the script's random state
        #: wake-ups of the clock's thread so far (a parked clock adds none)
        self.ticks = 0
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
        #: the sampling thread's id as the OS knows it (its CPU time is the doctor's, not the run's)
        self.native_id: int | None = None

    def start(self) -> None:
        if self._thread_id is None:
            self._main = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="pitstop-doctor-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._ticking.set()
        self._opened.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the clock's thread to end after :meth:`stop`; True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def open(self) -> None:
        if self._ticking.is_set():
            self.is_open = True
            if self._parked:
                self._opened.set()

    def close(self) -> None:
        self.is_open = False

    def learn_loop(self, frame) -> None:
        self.sites.learn_loop(frame)

    def now(self) -> tuple[str, str | None] | None:
        """The main thread's site right now (any thread may ask; the window need not be open)."""
        frame = sys._current_frames().get(self._main)
        try:
            return self.sites.site(frame) if frame is not None else None
        finally:
            del frame

    def _park(self) -> None:
        """Wait, without ticks, until a window opens (or the sampler stops). ``open`` sets the
        event only while parked; the window is read again after the event is cleared, so an
        opening between the two is never missed."""
        self._parked = True
        self._opened.clear()
        if not self.is_open and not self._stop:
            self._opened.wait()
        self._parked = False

    def _run(self) -> None:
        self.native_id = threading.get_native_id()  # the doctor's thread: not one of the run's (cores.py)
        closed, delay = 0, self.interval
        while not self._stop:
            self._ticking.wait()
            time.sleep(delay)
            self.ticks += 1
            delay = self.interval
            if self._stop:
                return
            if not self.is_open:
                closed += 1
                if closed >= 2:  # closed at two ticks in a row: a long phase; park until a window opens
                    self._park()
                    closed, delay = 0, self._phase.uniform(0.0, self.interval)
                continue
            closed = 0
            if self.skip():
                continue
            frame = sys._current_frames().get(self._main)
            if frame is not None and self.is_open:
                found, label = self.sites.site(frame), self.label
                if found is not None:
                    site, via = found
                    self.samples[label] += 1
                    self.counts[(label, site)] += 1
                    if via is not None:
                        self.via[site] = via
            del frame

    def top(self, label: str, n: int = 5) -> list[tuple[str, float, int]]:
        """The ``n`` most sampled sites under ``label``: (site, share of its samples, samples)."""
        total = self.samples[label]
        if not total:
            return []
        rows = sorted(((site, c) for (lab, site), c in self.counts.items() if lab == label), key=lambda r: -r[1])
        return [(site, c / total, c) for site, c in rows[:n]]


def timeout_position(inst) -> str:
    """Where the script was when the doctor's timeout came, for its message: the step (warm-up
    or observed, and which), the phase in progress, and the main thread's line (``inst``: the
    run's :class:`~pitstop.doctor.record.instrument.Instrumentation`)."""
    log = inst.log
    kind, index = log.kind(), log.index
    warmup = dict(log.plan).get("warmup", 0)
    step = (f"in warm-up step {index + 1} of {warmup}" if kind == "warmup" else
            f"in observed step {index - warmup + 1} of {log.steps}" if kind == "observed" else
            f"in step {index + 1}") + (" (before the first optimizer step)" if index == 0 and inst.primary is None else "")
    fw = inst.forward
    if inst.data.busy:
        phase = "waiting for a DataLoader batch"
    elif inst.bounds.in_backward:
        phase = "in backward"
    elif inst.bounds.in_opt:
        phase = "in an optimizer step"
    elif fw.depth > 0:
        phase = "in a forward with gradients enabled" if fw.grad_top else "in an evaluation forward (gradients off)"
    else:
        phase = "between the measured phases"
    sampler = inst.sampler
    found = sampler.now() if sampler is not None else None
    at = ""
    if found is not None:
        at = f", at {found[0]}" + (f" (via {found[1]})" if found[1] else "")
    return f"{step}, {phase}{at}"
