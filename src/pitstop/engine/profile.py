"""``ProfileSteps``: a ``fit`` callback that profiles a window of optimizer steps (PIT905).

``torch.profiler`` with a schedule (skip ``wait`` steps, warm up ``warmup``, record
``active``), stepped at every optimizer step, so the trace shows whole steps: the data wait,
forward, backward and optimizer step of each, on the host and (on CUDA) on the device. The
trace is written in Chrome/Perfetto format (open it at https://ui.perfetto.dev). On CUDA,
``memory_snapshot=`` also records the allocator's history over the same window and dumps a
snapshot for https://pytorch.org/memory_viz (CUDA only: skipped on CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from pitstop.engine.callbacks import Callback, FitResult, FitState

__all__ = ["ProfileSteps"]


class ProfileSteps(Callback):
    """Profile optimizer steps ``wait + warmup + 1`` to ``wait + warmup + active`` of ``fit``
    and write a Chrome trace to ``trace``. ``key_averages`` holds the op table afterwards."""

    def __init__(self, trace: str | Path, *, wait: int = 1, warmup: int = 1, active: int = 3,
                 record_shapes: bool = False, profile_memory: bool = False, memory_snapshot: str | Path | None = None):
        for name, value, low in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"ProfileSteps: {name} must be an int >= {low}, got {value!r}")
        self.trace = Path(trace)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.memory_snapshot = Path(memory_snapshot) if memory_snapshot is not None else None
        self.key_averages: Any = None
        self.written: list[Path] = []
        self._prof: profile | None = None
        self._cuda = False

    def _ready(self, prof: profile) -> None:
        self.trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.trace))
        self.key_averages = prof.key_averages()
        self.written.append(self.trace)
        if self._cuda and self.memory_snapshot is not None:
            torch.cuda.memory._dump_snapshot(str(self.memory_snapshot))
            torch.cuda.memory._record_memory_history(enabled=None)
            self.written.append(self.memory_snapshot)

    def on_fit_start(self, state: FitState) -> None:
        device = getattr(getattr(state.runner, "device", None), "type", "cpu")
        self._cuda = device == "cuda" and torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        if self._cuda and self.memory_snapshot is not None:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        self._prof = profile(activities=activities, record_shapes=self.record_shapes,
                             profile_memory=self.profile_memory, on_trace_ready=self._ready,
                             schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1))
        self._prof.start()

    def on_step_end(self, state: FitState, loss: Any) -> None:
        self._prof.step()

    def on_fit_end(self, state: FitState, result: FitResult) -> None:
        if self._prof is not None:
            self._prof.stop()  # writes the trace if the run ended inside the active window
            self._prof = None

    def on_exception(self, state: FitState, exc: BaseException) -> None:
        if self._prof is not None:
            self._prof.stop()  # never leave a profiler running past a failed fit
            self._prof = None
