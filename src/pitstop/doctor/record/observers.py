"""The forward observer (full mode): which model ran, in which grad/eval mode, under which
autocast, with what batch layout, and the forward phase of each step.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`: global module forward
pre/post hooks see every module call; the outermost call (depth 1) is a model's forward.
A forward with gradients enabled is handed to :class:`~pitstop.doctor.record.passes.Passes`,
which decides later whether it was training or evaluation; forwards without gradients
are counted here. Inner calls confirm the autocast state and find the batch layout
(:func:`~pitstop.doctor.record.batch.seq_layout`), and feed the profiled step's data flow.
"""

from __future__ import annotations

import functools
import sys
import time
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from pitstop.doctor.record.batch import Layout, first_tensor, primary_input, seq_layout
from pitstop.doctor.record.patching import compiling_check, user_site

if TYPE_CHECKING:
    from pitstop.doctor.record.boundaries import StepBoundaries
    from pitstop.doctor.record.memory import MemoryRecorder
    from pitstop.doctor.record.passes import Passes
    from pitstop.doctor.record.profiled import ProfiledStep
    from pitstop.doctor.record.steps import StepLog

__all__ = ["ModelObserver", "first_tensor"]

perf = time.perf_counter


def _stack_key(frame: Any, depth: int = 8) -> tuple:
    """The innermost ``depth`` frames' (code, line): the same key, the same call site (a frame
    walk through torch's and frameworks' files per forward is not paid again)."""
    key = []
    while frame is not None and len(key) < depth:
        key.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return tuple(key)


def _caller_kwargs() -> dict[str, Any]:
    """The keyword arguments of the module call being made (``model(**batch)``): global
    forward pre-hooks receive only the positional ones, so read them from
    ``Module._call_impl``'s frame."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        if f.f_code.co_name == "_call_impl":
            kw = f.f_locals.get("kwargs")
            return dict(kw) if isinstance(kw, dict) else {}
        f = f.f_back
    return {}


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _module_of(fn: Any, args: tuple, kwargs: dict) -> torch.nn.Module | None:
    """The largest ``nn.Module`` a compiled function works with (see
    :meth:`ModelObserver.function_boundary`), or None."""
    nn = torch.nn
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, nn.Module):
        return owner
    found = [v for v in (*args, *kwargs.values()) if isinstance(v, nn.Module)]
    code, fn_globals = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    if code is not None:
        found += [v for c in (getattr(fn, "__closure__", None) or ()) if isinstance(v := _cell(c), nn.Module)]
        found += [v for name in code.co_names if isinstance(v := fn_globals.get(name), nn.Module)]
    if not found:
        return None
    return max(found, key=lambda m: sum(p.numel() for p in m.parameters()))


class ModelObserver:
    """Forward hooks; see the module docstring. ``models``: id -> {"ref", "forwards": Counter,
    "device", "compiled"}; ``forwards``: forwards by kind (``train``, ``eval_no_grad``, ...)
    with the first call site of each kind in ``forward_where``."""

    def __init__(self, log: StepLog, bounds: StepBoundaries, passes: Passes, memory: MemoryRecorder,
                 profiled: ProfiledStep, *, sampler: Any, cuda: bool) -> None:
        self.log, self.bounds, self.passes, self.memory, self.profiled = log, bounds, passes, memory, profiled
        self.sampler, self.cuda = sampler, cuda
        self.models: dict[int, dict[str, Any]] = {}
        self.forwards: Counter[str] = Counter()
        self.forward_where: dict[str, str] = {}
        self.autocast: Counter[str] = Counter()
        self.input_shapes: Counter[str] = Counter()
        self.layouts: dict[int, Layout | None] = {}
        self.depth = 0  # module calls in progress (1: a model's forward)
        self._top: tuple[float, bool] = (0.0, True)
        self._top_call: tuple = ((), {}, 0.0)
        self._where = "?"
        self._sites: dict[tuple, str] = {}  # stack key -> the user's call site
        self._ac_pending: str | None = None  # device whose autocast state the first inner call confirms
        self._layout_probe: tuple[int, torch.Tensor] | None = None
        self._handles: list[Any] = []
        self._warning: Any = None
        self._compiling = compiling_check()

    @property
    def grad_top(self) -> bool:
        """Whether the model forward in progress (``depth > 0``) runs with gradients enabled."""
        return self._top[1]

    def install(self, patches: Any = None) -> None:
        from torch.nn.modules import module as module_mod

        self._handles.append(module_mod.register_module_forward_pre_hook(self._fwd_pre))
        self._handles.append(module_mod.register_module_forward_hook(self._fwd_post, always_call=True))
        # the global hooks fire once more for torch.compile's OptimizedModule: expected, say nothing
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        self._warning = warnings.filters[0]
        if patches is not None:
            original = patches.set(torch.nn.Module, "compile", lambda module, *a, **k: self._compile(original, module, a, k))

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._warning in warnings.filters:
            warnings.filters.remove(self._warning)

    def _compile(self, original, module, args, kwargs) -> Any:
        """``model.compile()`` puts the module's hooks inside the compiled region, where they do
        nothing (:func:`~pitstop.doctor.record.patching.compiling_check`): observe its calls at the boundary instead."""
        out = original(module, *args, **kwargs)
        inner = getattr(module, "_compiled_call_impl", None)
        if inner is not None:
            def boundary(*a: Any, **kw: Any) -> Any:
                self._fwd_pre(module, a, kw)
                output = None
                try:
                    output = inner(*a, **kw)
                    return output
                finally:
                    self._fwd_post(module, a, output)
            module._compiled_call_impl = boundary
        return out

    def function_boundary(self, compiled: Any, fn: Any) -> Any:
        """What ``torch.compile(fn)`` returned for a function ``fn``, observed at its boundary: a
        call made outside any model forward is the forward of the largest module ``fn`` uses
        (its bound ``self``, a module among its arguments, closure cells or the globals its code
        names), so that a compiled ``forward_loss(x, y)`` has its batch and forward phase like
        a model call; module hooks do not fire inside its graph. A function that uses no module
        is left as it was."""
        found: list[Any] = []

        def boundary(*a: Any, **kw: Any) -> Any:
            if self._compiling() or self.depth or self.log.quiet:  # dynamo first: no guard on the doctor's state
                return compiled(*a, **kw)
            module = found[0] if found else _module_of(fn, a, kw)
            if module is None:
                return compiled(*a, **kw)
            if not found:
                found.append(module)
            self._fwd_pre(module, a, kw)
            info = self.models.get(id(module))
            if info is not None:
                info["compiled"], info["compiled_function"] = True, True
            output = None
            try:
                output = compiled(*a, **kw)
                return output
            finally:
                self._fwd_post(module, a, output)

        functools.update_wrapper(boundary, compiled)
        return boundary

    # -- forward ----------------------------------------------------------------------
    def _fwd_pre(self, module, args, kwargs: dict | None = None) -> None:
        if self._compiling():  # inside a compiled region: observed at its boundary only
            return
        log = self.log
        if log.quiet:
            return
        self.depth += 1
        if self.depth > 1:  # an inner call (most calls: kept short)
            if self.depth == 2 and self._ac_pending is not None:
                self._confirm_autocast()
            if self._layout_probe is not None:
                self._layout_watch(module, args)
            if log.kind() == "profiled" and self.profiled.flow is not None and torch.is_grad_enabled():
                self.profiled.flow.pre(module, args)
            return
        grad = torch.is_grad_enabled()
        if self.depth == 1:
            if grad and self.cuda:
                self.memory.phase("forward", True)
            if not self.bounds.in_backward:
                kwargs = _caller_kwargs() if kwargs is None else kwargs
                self._top_call = (args, kwargs, log.unaccounted())
                if self.sampler is not None:
                    self.sampler.close()
                    if grad:
                        self.sampler.label = "other"
                self._layout_start(module, args, kwargs)
                self._note_forward(module, args, grad)
            self._top = (perf(), grad)
        flow = self.profiled.flow
        if flow is not None and grad and log.kind() == "profiled":
            flow.pre(module, args)

    def _fwd_post(self, module, args, output) -> None:
        if self._compiling():
            return
        log = self.log
        if log.quiet:
            return
        if log.kind() == "profiled":
            flow = self.profiled.flow
            if flow is not None and self._top[1]:
                flow.post(module, output)
        if self.depth > 1:  # an inner call
            self.depth -= 1
            return
        if self.depth == 1 and not self.bounds.in_backward:
            seconds = perf() - self._top[0]
            self._layout_end(module)
            if self._top[1]:
                log.cur.phases["forward"] += seconds
                a, kw, unaccounted = self._top_call
                self.passes.watch(module, a, kw, output, seconds, self._where, unaccounted,
                                  self.layouts.get(id(module)))
                if self.cuda:
                    self.memory.phase("forward", False)
            else:
                log.cur.phases["eval"] += seconds
                log.eval_mark(self._top[0], self._top[0] + seconds, forward=True)
            if self.sampler is not None:
                self.sampler.open()
        self.depth = max(0, self.depth - 1)

    def _note_forward(self, module, args, grad: bool) -> None:
        info = self.models.get(id(module))
        if info is None:
            info = self.models[id(module)] = self._model_info(module)
        if not grad:
            kind = "eval_inference_mode" if torch.is_inference_mode_enabled() else "eval_no_grad"
            if module.training:
                for k in ("nograd_train_mode", "train_mode_eval"):
                    self._count_forward(k)
                    info["forwards"][k] += 1
            self._count_forward(kind)
            info["forwards"][kind] += 1
            return
        # grad enabled: training or evaluation is decided by whether a backward follows (passes.py)
        key = _stack_key(sys._getframe(2))
        where = self._sites.get(key)
        if where is None:
            where = user_site(3, through_torch=True) or "?"
            if len(self._sites) < 1024:
                self._sites[key] = where
        self._where = where
        dev = info["device"]
        ac = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        self.autocast[str(ac).replace("torch.", "") if ac is not None else "none"] += 1
        # wrappers (Fabric, Accelerate, HF Trainer) enter autocast inside their forward:
        # what counts is the state the model's layers run under (checked at the first inner call)
        self._ac_pending = dev if ac is None else None
        x = first_tensor(args)
        if x is not None and self.log.kind() == "observed":
            self.input_shapes["x".join(map(str, x.shape))] += 1
        if not info.get("keys_done"):
            self.memory.add_params(module)
            info["keys_done"] = True

    def _confirm_autocast(self) -> None:
        dev, self._ac_pending = self._ac_pending, None
        if torch.is_autocast_enabled(dev) and self.autocast["none"] > 0:
            self.autocast["none"] -= 1
            self.autocast[str(torch.get_autocast_dtype(dev)).replace("torch.", "")] += 1

    def _count_forward(self, kind: str) -> None:
        self.forwards[kind] += 1
        if kind not in self.forward_where:
            self.forward_where[kind] = user_site(3, through_torch=True) or "?"

    def count(self, mid: int, kind: str, where: str) -> None:
        """One forward of model ``mid`` of ``kind``, decided later (by :class:`Passes`)."""
        self.forwards[kind] += 1
        self.forward_where.setdefault(kind, where)
        info = self.models.get(mid)
        if info is not None:
            info["forwards"][kind] += 1

    def _model_info(self, module) -> dict[str, Any]:
        p = next(module.parameters(), None)
        device = p.device.type if p is not None else "cpu"
        compiled = type(module).__name__ == "OptimizedModule" or hasattr(module, "_orig_mod") \
            or getattr(module, "_compiled_call_impl", None) is not None
        # a strong reference: the script's frames are gone by the time the report is built
        return {"ref": (lambda m=module: m), "forwards": Counter(), "device": device if device in ("cpu", "cuda") else "cpu",
                "compiled": compiled}

    def live_models(self) -> list[Any]:
        """The models seen so far (those still alive)."""
        return [m for m in (info["ref"]() for info in self.models.values()) if m is not None]

    def any_compiled(self) -> bool:
        return any(info.get("compiled") for info in self.models.values())

    # -- layout of each model's batch ---------------------------------------------------
    def _layout_watch(self, module, args) -> None:
        """Inside the first forward of a model: the first recurrent/attention layer decides."""
        mid, top = self._layout_probe
        lay = seq_layout(module, args, top)
        if lay is not None:
            self.layouts[mid] = lay
            self._layout_probe = None

    def _layout_start(self, module, args, kwargs) -> None:
        if id(module) in self.layouts:
            return
        found = primary_input(args, kwargs)
        if found is not None and found[1].dim() >= 2:
            self._layout_probe = (id(module), found[1])
        else:
            self.layouts[id(module)] = None

    def _layout_end(self, module) -> None:
        if self._layout_probe is not None and self._layout_probe[0] == id(module):
            self.layouts.setdefault(id(module), None)
            self._layout_probe = None
