"""``pitstop.doctor(step_fn)``: the doctor for code that has a step function.

The same instrumentation as ``pitstop doctor SCRIPT``, installed in *this* process around
calls of ``step_fn`` (no child process, no script). Use it when you own the loop::

    def step():
        x, y = next(batches)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()

    report = pitstop.doctor(step, steps=20, warmup=3)
    report.print()                 # the terminal report
    report.findings                # ranked Finding objects
    report.to_dict()               # the --format json document

``pitstop.fit`` / engine users: pass a function that runs one step of the engine, or run
the training script itself under ``pitstop doctor train.py`` (the engine steps a torch
optimizer, so the global step hooks see it). Every ``optimizer.step()`` counts as a step.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from pitstop.doctor.diagnosis import Diagnosis, diagnose
from pitstop.doctor.spec import RunResult, RunSpec

__all__ = ["doctor", "DoctorReport", "DoctorSession"]


class DoctorReport(Diagnosis):
    """A :class:`Diagnosis` with rendering shortcuts."""

    def print(self, file=None) -> None:
        from pitstop.report.doctor_terminal import render

        render(self, file=file)

    def html(self, path) -> None:
        from pathlib import Path

        from pitstop.report.doctor_html import doctor_html

        Path(path).write_text(doctor_html(self), encoding="utf-8")


def doctor(step_fn: Callable[[], Any], steps: int = 10, warmup: int = 2, *, probes: bool = True,
           trace_dir: str | None = None, trace_steps: int = 3, max_calls: int | None = None) -> DoctorReport:
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
    probes and returns the :class:`DoctorReport`. What :func:`doctor` and the framework
    callbacks (:mod:`pitstop.integrations`) run on."""

    def __init__(self, target: str, steps: int = 10, warmup: int = 2, *, probes: bool = True,
                 trace_dir: str | None = None, trace_steps: int = 3) -> None:
        from pitstop.doctor.instrument import Instrumentation

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

    def finish(self, *, status: str = "finished", message: str = "", traceback: str | None = None) -> DoctorReport:
        from pitstop.doctor.collect import observations

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
        d = diagnose(result)
        return DoctorReport(result=d.result, observations=d.observations, findings=d.findings,
                            skipped=d.skipped, errors=d.errors, thresholds=d.thresholds)
