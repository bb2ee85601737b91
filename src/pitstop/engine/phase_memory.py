"""``PhaseMemory``: a ``fit`` callback that measures memory per phase of chosen steps (PIT405).

For each chosen optimizer step it records the peak memory of the forward, of the backward
(with gradient accumulation: every micro-batch's backward, and whatever runs between the end
of one forward and the next forward or the optimizer step), of the optimizer step, and the
memory still held when the step is over. It installs hooks and leaves the loop alone: a
forward pre-hook and a forward hook on the module the forward runs (``FitState.train_model``)
and ``register_step_pre_hook``/``register_step_post_hook`` on the optimizer. Every hook is
removed after the last chosen step, in ``on_fit_end``, in ``on_exception`` (``fit`` raised),
and when a ``with PhaseMemory(...)`` block exits.

Memory source:

- CUDA (any device ``torch.accelerator`` knows): the caching allocator's counters,
  ``reset_peak_memory_stats`` at every phase boundary, then ``max_memory_allocated`` /
  ``memory_allocated``. These counters are kept on the host when an allocation is made (in
  stream order, at kernel-launch time), so reading or resetting them never syncs the device.
- CPU: there are no allocator counters. One tracked step runs under PyTorch's own
  ``MemTracker`` (``torch.distributed._tools.mem_tracker``, a ``TorchDispatchMode`` that
  follows every tensor storage alive: parameters, gradients, optimizer state, activations,
  temporaries, and the batch). The tracker is entered *between* steps (before the chosen
  step's batch is drawn) and left after it; the phase peak is the highest total it saw
  since the last boundary. Not supported: a compiled model on CPU (inductor's kernels
  allocate outside the dispatcher), reported as skipped. Bytes are tensor bytes, not RSS.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from pitstop.engine.callbacks import Callback, FitResult, FitState

__all__ = ["PhaseMemory", "memtracker_peak"]

_METHODS = ("auto", "allocator", "tracker")
_FIELDS = ("forward_peak", "backward_peak", "optimizer_peak", "held_after")


class PhaseMemory(Callback):
    """Peak memory of the forward, backward, optimizer step, and memory held after the step,
    for the optimizer steps ``steps`` (1 = the first step of this run's count).

    ``method``: ``"auto"`` (allocator counters on an accelerator, ``MemTracker`` on CPU),
    ``"allocator"`` or ``"tracker"``. After ``fit``: ``phases`` holds one dict per measured
    step (bytes as ints; ``start``: memory when the step's first forward began,
    ``before_optimizer``: when the optimizer step began; a phase that did not run, e.g. an
    optimizer step skipped by the GradScaler, is None), ``skipped`` the reason when nothing
    could be measured, and ``report()`` a table in MiB.
    """

    def __init__(self, steps: Iterable[int] = (1, 2), *, method: str = "auto"):
        steps = tuple(steps)
        if not steps or any(not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in steps):
            raise ValueError(f"PhaseMemory: steps must be ints >= 1, got {steps!r}")
        if method not in _METHODS:
            raise ValueError(f"PhaseMemory: method must be one of {', '.join(_METHODS)}, got {method!r}")
        self.steps = frozenset(steps)
        self.method = method
        self.phases: list[dict[str, Any]] = []
        self.skipped: str | None = None
        self._handles: list[Any] = []
        self._source: Any = None
        self._state: FitState | None = None
        self._rec: dict[str, Any] | None = None
        self._phase = ""

    # -- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> PhaseMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook and leave the CPU tracker; safe to call twice."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._source is not None:
            self._source.end()
        self._rec, self._phase = None, ""

    @property
    def active(self) -> bool:
        """Whether hooks are installed."""
        return bool(self._handles)

    # -- callback hooks ---------------------------------------------------------------------
    def on_fit_start(self, state: FitState) -> None:
        self.close()  # hooks a previous, failed run left behind
        self.phases, self.skipped, self._state = [], None, state
        model = state.train_model if state.train_model is not None else state.model
        optimizer = state.optimizer
        if model is None or optimizer is None:
            return self._skip("the fit state holds no model or optimizer")
        if max(self.steps) <= state.step:
            return self._skip(f"steps {sorted(self.steps)} were all done before this run started (resumed at step "
                              f"{state.step})")
        device = getattr(state.runner, "device", None)
        device = device if device is not None else _param_device(state.model)
        source, reason = _make_source(self.method, torch.device(device), state)
        if source is None:
            return self._skip(reason)
        self._source = source
        self._handles = [model.register_forward_pre_hook(self._forward_start),
                         model.register_forward_hook(self._forward_end),
                         optimizer.register_step_pre_hook(self._optimizer_start),
                         optimizer.register_step_post_hook(self._optimizer_end)]
        if state.step + 1 in self.steps:
            source.arm()

    def on_step_end(self, state: FitState, loss: Any) -> None:
        rec = self._rec
        if rec is not None and rec["step"] == state.step:
            if self._phase == "backward":  # no optimizer step ran (skipped on inf/NaN gradients)
                rec["backward_peak"] = _max(rec["backward_peak"], self._source.peak())
            rec["held_after"] = self._source.current()
            self.phases.append(rec)
            self._rec, self._phase = None, ""
        if not self._handles:
            return
        self._source.end()
        if state.step >= max(self.steps):
            self.close()  # all chosen steps done: nothing stays hooked for the rest of the run
        elif state.step + 1 in self.steps:
            self._source.arm()

    def on_fit_end(self, state: FitState, result: FitResult) -> None:
        self.close()

    def on_exception(self, state: FitState, exc: BaseException) -> None:
        self.close()  # fit failed: no hook or tracker outlives it

    # -- model and optimizer hooks ----------------------------------------------------------
    def _forward_start(self, module: Any, args: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return  # an evaluation forward
        step = self._state.step + 1
        if step not in self.steps:
            return
        src = self._source
        if not src.ready:
            return  # never report numbers a source did not measure
        src.add_inputs(args)
        if self._rec is None or self._rec["step"] != step:
            self._rec = {"step": step, "start": src.current(), **dict.fromkeys(_FIELDS), "before_optimizer": None,
                         "micro_batches": 0, "device": src.device.type, "method": src.name}
        elif self._phase == "backward":  # the next micro-batch: the previous backward ends here
            self._rec["backward_peak"] = _max(self._rec["backward_peak"], src.peak())
        self._rec["micro_batches"] += 1
        src.reset()
        self._phase = "forward"

    def _forward_end(self, module: Any, args: Any, output: Any) -> None:
        if self._rec is not None and self._phase == "forward":
            self._rec["forward_peak"] = _max(self._rec["forward_peak"], self._source.peak())
            self._source.reset()
            self._phase = "backward"

    def _optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._rec is not None and self._phase == "backward":
            self._rec["backward_peak"] = _max(self._rec["backward_peak"], self._source.peak())
            self._rec["before_optimizer"] = self._source.current()
            self._source.reset()
            self._phase = "optimizer"

    def _optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._rec is not None and self._phase == "optimizer":
            self._rec["optimizer_peak"] = self._source.peak()
            self._source.reset()
            self._phase = "after"

    # -- output -----------------------------------------------------------------------------
    def report(self) -> str:
        """The measured phases as a small table (MiB)."""
        if self.skipped:
            return f"phase memory: skipped ({self.skipped})"
        if not self.phases:
            return f"phase memory: no step measured (steps {sorted(self.steps)} not reached)"
        head = ("step", "start", "forward", "backward", "optimizer", "held after")
        rows = [(str(r["step"]), *(_mib(r[k]) for k in ("start", *_FIELDS))) for r in self.phases]
        widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [head, *rows]]
        first = self.phases[0]
        return "\n".join([f"phase memory, MiB peak per phase ({first['device']}, {first['method']}):", *lines])

    def _skip(self, reason: str) -> None:
        self.skipped = reason
        warnings.warn(f"PhaseMemory skipped: {reason}", UserWarning, stacklevel=3)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.2f}"


def _param_device(model: Any) -> torch.device:
    for p in model.parameters() if model is not None else ():
        return p.device
    return torch.device("cpu")


def _tensors(obj: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _make_source(method: str, device: torch.device, state: FitState) -> tuple[Any, str]:
    if method == "auto":
        method = "tracker" if device.type == "cpu" else "allocator"
    if method == "allocator":
        if device.type == "cpu":
            return None, "allocator counters need an accelerator device (CUDA); this run is on cpu"
        return _Allocator(device), ""
    if getattr(state.recipe, "compile", None):
        return None, "MemTracker cannot follow a compiled model (inductor's kernels allocate outside the dispatcher)"
    try:
        tracker_cls = _tracker_class()
    except Exception as exc:  # torch built without distributed, or a MemTracker without the seam used here
        return None, f"torch MemTracker is not usable in this torch build ({type(exc).__name__}: {exc})"
    root = state.train_model if state.train_model is not None else state.model
    return _Tracker(tracker_cls, device, state.model, state.optimizer, root), ""


class _Allocator:
    """The accelerator's caching-allocator counters; reading and resetting them does not sync."""

    def __init__(self, device: torch.device):
        acc = getattr(torch, "accelerator", None)
        self.api = acc if acc is not None and hasattr(acc, "max_memory_allocated") else torch.cuda
        self.name = ("torch.accelerator" if self.api is acc else "torch.cuda") + ".max_memory_allocated"
        self.device = device
        # an explicit device index: both torch.accelerator and torch.cuda take one
        if device.index is not None:
            self.index = device.index
        elif self.api is torch.cuda:
            self.index = torch.cuda.current_device()
        else:
            self.index = self.api.current_device_index()

    ready = True

    def arm(self) -> None:
        pass

    def end(self) -> None:
        pass

    def add_inputs(self, args: Any) -> None:
        pass  # already counted: the batch lives in the allocator

    def current(self) -> int:
        return int(self.api.memory_allocated(self.index))  # host-side counter: no sync

    def peak(self) -> int:
        return int(self.api.max_memory_allocated(self.index))  # host-side counter: no sync

    def reset(self) -> None:
        self.api.reset_peak_memory_stats(self.index)  # peak := current allocation; no sync


class _Tracker:
    """CPU: one ``MemTracker`` per chosen step, entered between steps, left at the step's end."""

    name = "torch MemTracker (CPU)"

    def __init__(self, tracker_cls: type, device: torch.device, model: Any, optimizer: Any, root: Any):
        self.cls, self.device, self.model, self.optimizer, self.root = tracker_cls, device, model, optimizer, root
        self.tracker: Any = None

    def arm(self) -> None:
        self.end()
        tracker = self.cls()
        tracker.root = self.root
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tracker.track_external(self.model, self.optimizer)  # state created before the tracker
            tracker.__enter__()
        self.tracker = tracker

    def end(self) -> None:
        tracker, self.tracker = self.tracker, None
        if tracker is not None:
            tracker.__exit__(None, None, None)

    @property
    def ready(self) -> bool:
        return self.tracker is not None

    def add_inputs(self, args: Any) -> None:
        if self.tracker is not None:
            self.tracker.track_external(*_tensors(args))  # a batch made outside the tracker (loader workers)

    def current(self) -> int:
        return self.tracker.current() if self.tracker is not None else 0

    def peak(self) -> int:
        return self.tracker.phase_peak if self.tracker is not None else 0

    def reset(self) -> None:
        if self.tracker is not None:
            self.tracker.phase_peak = self.tracker.current()


def memtracker_peak(step: Callable[[], Any], model: Any, optimizer: Any) -> int:
    """Peak tensor bytes while ``step()`` runs, followed by PyTorch's ``MemTracker`` (CPU; see
    the module docstring): parameters, gradients, optimizer state, activations, temporaries.
    ``step`` may call ``model`` several times (gradient accumulation). Raises when the tracker
    is not usable in this torch build or cannot follow the step."""
    tracker = _tracker_class()()
    tracker.root = model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracker.track_external(model, optimizer)  # state created before the tracker
        with tracker:
            step()
    return tracker.phase_peak


def _tracker_class() -> type:
    """``MemTracker`` with a resettable peak: the tracker keeps one peak since it was entered;
    this subclass also keeps the highest total since the last phase boundary."""
    from torch.distributed._tools.mem_tracker import MemTracker

    seams = all(callable(getattr(MemTracker, name, None)) for name in ("_update_peak_stats", "_pre_fw_hook"))
    if not seams or not hasattr(MemTracker(), "_curr_mem_snap"):
        raise RuntimeError("MemTracker has no per-operation peak update to follow")

    class _PhaseTracker(MemTracker):
        phase_peak = 0
        root: Any = None

        def current(self) -> int:
            return sum(int(snap.get("Total", 0)) for snap in self._curr_mem_snap.values())

        def _pre_fw_hook(self, module: Any, inputs: Any) -> None:
            # the root module called again (the next micro-batch, or an evaluation between
            # steps): the previous call's backward is over, so its per-module stats can go
            # (MemTracker refuses a second root call otherwise); totals are kept
            if module is self.root and module in self.memory_tracking and not self._mod_tracker.is_bw:
                self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

        def _update_peak_stats(self, peak_state: Any) -> None:  # called after every operation
            super()._update_peak_stats(peak_state)
            total = self.current()
            if total > self.phase_peak:
                self.phase_peak = total

    return _PhaseTracker
