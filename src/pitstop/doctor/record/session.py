"""The doctor in *this* process: :class:`DoctorSession` and :func:`run_step_fn`.

The same instrumentation as ``pitstop doctor SCRIPT``, installed in this process around calls
of a step function (no child process, no script). They return the typed :class:`Diagnosis`;
the public ``pitstop.doctor(step_fn)`` (:mod:`pitstop.api`) wraps it in a
``DoctorReport`` (``report/doctor_report.py``) that can print itself.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from pitstop.doctor.analysis.diagnosis import Diagnosis, diagnose
from pitstop.doctor.run.spec import RunResult, RunSpec

__all__ = ["run_step_fn", "DoctorSession"]


def run_step_fn(step_fn: Callable[[], Any], steps: int = 10, warmup: int = 2, *, probes: bool = True,
                trace_dir: str | None = None, trace_steps: int = 3, max_calls: int | None = None) -> Diagnosis:
    """Call ``step_fn`` until ``warmup`` + ``steps`` optimizer steps (plus one profiled
    step, and ``trace_steps`` under the profiler when ``trace_dir`` is set) have run;
    return the diagnosis. An exception from ``step_fn`` ends the run: the report keeps
    what was measured and its traceback (``report.outcome == "script_failed"``).
    """
    name = getattr(step_fn, "__qualname__", type(step_fn).__name__)
    session = DoctorSession(f"<step function {name}>", steps, warmup, probes=probes, trace_dir=trace_dir,
                            trace_steps=trace_steps)
    limit = max_calls if max_calls is not None else 16 * session.total
    status, message, tb = "finished", "", None
    session.start()
    calls = 0
    try:
        while not session.finished and calls < limit:
            step_fn()
            calls += 1
        message = (f"step_fn called {calls} times" if session.finished
                   else f"step_fn called {calls} times without completing {session.total} optimizer steps")
    except Exception as exc:
        status, tb = "error", traceback.format_exc()
        message = f"step_fn raised {type(exc).__name__}: {exc}"
    return session.finish(status=status, message=message, traceback=tb)


class DoctorSession:
    """The doctor over a window of optimizer steps of code running in *this* process:
    :meth:`start` installs the instrumentation, :attr:`finished` turns True once
    ``warmup + steps`` (+ the profiled step) have run, :meth:`finish` uninstalls it, runs the
    probes and returns the :class:`Diagnosis`. What :func:`run_step_fn` and the framework
    callbacks (:mod:`pitstop.integrations`) run on."""

    def __init__(self, target: str, steps: int = 10, warmup: int = 2, *, probes: bool = True,
                 trace_dir: str | None = None, trace_steps: int = 3) -> None:
        from pitstop.doctor.record.instrument import Instrumentation

        self.probes = probes
        self.spec = RunSpec(script=target, steps=steps, warmup=warmup, timeout=None, probes=probes,
                            trace_dir=trace_dir, trace_steps=trace_steps, stop=False, seed=None)
        self.inst = Instrumentation(steps, warmup, mode="full", trace_dir=trace_dir, trace_steps=trace_steps,
                                    stop=False)
        self.started: float | None = None

    @property
    def total(self) -> int:
        return self.inst.total

    @property
    def finished(self) -> bool:
        return self.inst.finished

    def start(self) -> None:
        self.started = time.perf_counter()
        self.inst.install()

    def finish(self, *, status: str = "finished", message: str = "", traceback: str | None = None) -> Diagnosis:
        from pitstop.doctor.record.collect import observations

        inst = self.inst
        inst.uninstall()
        inst.read_losses()
        if not message:
            message = (f"{len(inst.records)} optimizer steps observed in process" if inst.finished else
                       f"stopped after {len(inst.records)} of {inst.total} optimizer steps")
        obs = observations(inst, probes=self.probes and status == "finished")
        result = RunResult(spec=self.spec, status=status, steps=list(inst.records), traceback=traceback,
                           message=message, elapsed=time.perf_counter() - (self.started or time.perf_counter()),
                           device=obs.device, observations=obs, trace_path=inst.trace_path)
        return diagnose(result)
