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

This module joins the mechanism (:mod:`pitstop.doctor.record.session`) to its renderer
(:class:`~pitstop.report.doctor_report.DoctorReport`); the mechanism never imports ``report/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pitstop.doctor.record.session import run_step_fn
from pitstop.report.doctor_report import DoctorReport

__all__ = ["doctor", "DoctorReport"]


def doctor(step_fn: Callable[[], Any], steps: int = 10, warmup: int = 2, *, probes: bool = True,
           trace_dir: str | None = None, trace_steps: int = 3, max_calls: int | None = None) -> DoctorReport:
    """Call ``step_fn`` until ``warmup`` + ``steps`` optimizer steps (plus one profiled
    step, and ``trace_steps`` under the profiler when ``trace_dir`` is set) have run;
    return the diagnosis. An exception from ``step_fn`` ends the run: the report keeps
    what was measured and its traceback (``report.outcome == "script_failed"``).
    """
    return DoctorReport.of(run_step_fn(step_fn, steps, warmup, probes=probes, trace_dir=trace_dir,
                                       trace_steps=trace_steps, max_calls=max_calls))
