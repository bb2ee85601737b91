"""Helpers that knobs use in the child process to change an unmodified script (script mode).

They run before the user's script starts (through the doctor's setup seam), so they cannot
take the script's objects as arguments. Instead:

- :func:`on_model` calls a function with the **top-level model** just before its first
  training forward: the first module called from outside any other module, with gradients
  enabled, in training mode, that has trainable parameters -- or rather the user's module
  inside it when it is a wrapper (Fabric's ``_FabricModule``, DDP, ``torch.compile``), so
  that a replaced ``forward`` is never reached again through the wrapper (no recursion).
  A function that raises is reported as :class:`KnobApplyError` (the knob failed, not the
  script). The model is found by wrapping ``nn.Module.__call__`` only until that call;
  the wrapper is then removed, so the steps measured afterwards pay nothing for it. Functions run in ``order`` (layout before
  precision before compilation), and may replace ``model.forward`` on the instance with
  :func:`wrap_forward` (the engine's activation checkpointing does the same: ``state_dict``
  keys do not change).
- :func:`patch_init` changes the default keyword arguments of a class's constructor
  (``DataLoader(num_workers=...)``, ``torch.optim.SGD(fused=...)``) for objects the script
  builds afterwards; arguments the user passed explicitly are changed only where the knob
  says so.
- :func:`to_float`: floating outputs of an autocast forward back to fp32 (what Lightning
  Fabric's precision plugins do with module outputs), so the script's loss runs in fp32.
- :func:`grad_scaler`: the script's backward calls, optimizer steps and gradient clipping go
  through one ``torch.amp.GradScaler`` (fp16 autocast), as the pasted snippet would.
- :func:`ddp_as_fsdp2`: every ``DistributedDataParallel(module, ...)`` built afterwards returns
  ``module`` itself sharded by FSDP2 as pitstop's engine shards (one unit per block, then the
  root), so the optimizer the script builds next holds the shards; ``model.module`` (the module)
  and ``model.no_sync()`` (``set_requires_gradient_sync(False)`` inside) keep working.

Torch is imported inside the functions: this module is imported by tip modules' methods only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from pitstop.doctor.record.frameworks import unwrap
from pitstop.doctor.run.spec import SetupFailed

__all__ = ["on_model", "wrap_forward", "patch_init", "to_float", "map_tensors", "grad_scaler", "scaler_blocker", "reset",
           "KnobApplyError", "ddp_as_fsdp2"]


class KnobApplyError(SetupFailed):
    """A knob could not change the script's model (raised in the child): the doctor's child
    reports the run as ``setup_error`` with this message (a typed status, not traceback text),
    and ``tune`` reports the knob as failed to apply, not the script as broken."""

_callbacks: list[tuple[int, int, Callable[[Any], None]]] = []
_installed: dict[str, Any] = {}


def _trainable(module: Any) -> bool:
    return any(p.requires_grad for p in module.parameters())


def on_model(callback: Callable[[Any], None], *, order: int = 50) -> None:
    """Call ``callback(model)`` once, right before the top-level model's first training forward."""
    _callbacks.append((order, len(_callbacks), callback))
    if "call" in _installed:
        return
    import torch
    from torch import nn

    original = nn.Module.__call__
    depth = [0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "call" not in _installed:  # already found (another thread/recursion): plain call
            return original(self, *args, **kwargs)
        if depth[0] == 0 and self.training and torch.is_grad_enabled() and _trainable(self):
            nn.Module.__call__ = original  # found: from here on the plain, unwrapped call
            del _installed["call"]
            target = unwrap(self)  # the user's module inside Fabric/DDP/compile wrappers
            for _, _, fn in sorted(_callbacks, key=lambda c: (c[0], c[1])):
                try:
                    fn(target)
                except Exception as exc:
                    _callbacks.clear()
                    raise KnobApplyError(f"could not change {type(target).__name__}: {type(exc).__name__}: {exc}") from exc
            _callbacks.clear()
            return original(self, *args, **kwargs)  # looks up self.forward: the wrappers apply
        depth[0] += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    _installed["call"] = original
    nn.Module.__call__ = __call__


def wrap_forward(model: Any, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``model.forward`` on the instance by ``wrapper(current forward)``."""
    model.forward = wrapper(model.forward)


def map_tensors(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every tensor in a (nested) tuple/list/dict; other values unchanged."""
    import torch

    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(map_tensors(o, fn) for o in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn)) for k, v in obj.items())
    return obj


def to_float(obj: Any) -> Any:
    """Floating tensors of lower precision (bf16/fp16) converted to fp32."""
    import torch

    def cast(t: torch.Tensor) -> torch.Tensor:
        return t.float() if t.is_floating_point() and t.dtype in (torch.bfloat16, torch.float16) else t

    return map_tensors(obj, cast)


def patch_init(cls: type, change: Callable[[dict[str, Any]], None]) -> None:
    """Wrap ``cls.__init__`` so that ``change(arguments)`` may edit the bound arguments
    (a dict: name -> value, only those passed explicitly) before the real constructor runs."""
    original = cls.__init__
    sig = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:  # let the real constructor raise its own error
            return original(self, *args, **kwargs)
        change(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    __init__._pitstop_original = original  # type: ignore[attr-defined]
    _installed.setdefault("init", []).append((cls, cls.__dict__.get("__init__")))
    cls.__init__ = __init__


def ddp_as_fsdp2() -> None:
    """From now on ``DistributedDataParallel(module, ...)`` shards ``module`` with FSDP2 and
    returns it (see the module docs)."""
    import contextlib

    from torch.nn.parallel import DistributedDataParallel

    from pitstop.engine.sharded import shard_model

    def __new__(cls: type, module: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is not DistributedDataParallel or module is None:
            return object.__new__(cls)
        shard_model(module, next(module.parameters()).device)

        @contextlib.contextmanager
        def no_sync() -> Any:
            module.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                module.set_requires_gradient_sync(True)
        object.__setattr__(module, "module", module)  # not a registered submodule: state_dict unchanged
        object.__setattr__(module, "no_sync", no_sync)
        return module  # not a DistributedDataParallel: its __init__ does not run

    _replace(DistributedDataParallel, "__new__", staticmethod(__new__))


def _replace(owner: Any, name: str, value: Any) -> None:
    _installed.setdefault("attrs", []).append((owner, name, getattr(owner, name)))
    setattr(owner, name, value)


#: where gradient clipping reads the gradients (``torch.nn.utils`` and its ``clip_grad`` module)
CLIP_FUNCTIONS = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_")


def grad_scaler(device: str) -> Any:
    """Run the script's fp16 training through one ``torch.amp.GradScaler(device)``, the way
    the pasted snippet does (``scaler.scale(loss).backward()``, ``scaler.unscale_`` before
    clipping, ``scaler.step(optimizer)``, ``scaler.update()``); returns the scaler.

    - ``torch.autograd.backward`` (what ``loss.backward()`` calls) backpropagates
      ``scaler.scale(loss)``; the first backward after an optimizer step first runs
      ``scaler.update()`` (once per iteration, after every optimizer of the iteration stepped);
    - every optimizer built afterwards steps through ``scaler.step(optimizer)``; when the scaler
      skips the update (inf/NaN gradients), the optimizer's step still runs with no gradient
      (nothing changes, its step hooks fire), so a skipped iteration still ends a step;
    - ``torch.nn.utils`` clipping (``clip_grad_norm_``, ``clip_grad_value_``, ...) first runs
      ``scaler.unscale_`` on every optimizer not yet unscaled or stepped in this iteration;
    - ``optimizer.step(closure)`` cannot be scaled: :class:`KnobApplyError`.
    """
    import types
    import weakref

    import torch
    from torch.optim import Optimizer

    scaler = torch.amp.GradScaler(device)
    optimizers: weakref.WeakSet = weakref.WeakSet()
    done: set[int] = set()  # optimizers unscaled or stepped since the last update()
    state = {"scaled": False, "pending": False, "inside": False, "ran": False}
    backward = torch.autograd.backward

    def scaled_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if state["pending"]:  # the previous iteration stepped: its update, before scaling this loss
            scaler.update()
            done.clear()
            state["pending"] = False
        state["scaled"] = True
        return backward(scaler.scale(tensors), *args, **kwargs)

    def unscale_pending() -> None:
        if not state["scaled"]:
            return
        for opt in list(optimizers):
            if id(opt) not in done:
                scaler.unscale_(opt)
                done.add(id(opt))

    def scale_steps(opt: Any) -> None:
        plain = opt.step  # the class's step, with the optimizer step hooks

        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            if state["inside"]:  # scaler.step calling back: the real step
                state["ran"] = True
                return plain(*args, **kwargs)
            if args or kwargs.get("closure") is not None:
                raise KnobApplyError(f"{type(self).__name__}.step(closure): a GradScaler cannot scale the closure's "
                                     "backward")
            if not state["scaled"]:  # no backward yet: nothing was scaled
                return plain(*args, **kwargs)
            state["inside"], state["ran"] = True, False
            try:
                out = scaler.step(self, *args, **kwargs)
            finally:
                state["inside"] = False
            done.add(id(self))
            state["pending"] = True
            if not state["ran"]:  # skipped (inf/NaN): a step that changes nothing, so the step still ends
                params = [p for g in self.param_groups for p in g["params"]]
                grads = [p.grad for p in params]
                for p in params:
                    p.grad = None
                try:
                    plain()
                finally:
                    for p, g in zip(params, grads):
                        p.grad = g
            return out

        opt.step = types.MethodType(step, opt)  # a bound method: LR schedulers wrap its __func__
        optimizers.add(opt)

    init = Optimizer.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if "step" not in vars(self):
            scale_steps(self)

    def before(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def clip(*args: Any, **kwargs: Any) -> Any:
            unscale_pending()
            return fn(*args, **kwargs)
        return clip

    _replace(torch.autograd, "backward", scaled_backward)
    _replace(Optimizer, "__init__", __init__)
    for owner in (torch.nn.utils, torch.nn.utils.clip_grad):
        for name in CLIP_FUNCTIONS:
            if hasattr(owner, name):
                _replace(owner, name, before(getattr(owner, name)))
    return scaler


def scaler_blocker(ctx: Any, what: str) -> str | None:
    """Why :func:`grad_scaler` cannot be put around this script's training safely, from the
    survey (a :class:`pitstop.tune.knob.Context`): ``what`` needs it, and the script shows no
    ``torch.optim`` step, no backward, a framework running both, or a GradScaler of its own.
    None: it can (precision over recall: the value is then not run, with this reason)."""
    if ctx.framework:
        return (f"{what}, and {ctx.framework} runs both itself: use its own fp16 precision option "
                "(e.g. Lightning's precision='16-mixed')")
    if ctx.scaler_calls:
        return f"the script already scales its losses with a GradScaler ({ctx.scaler_calls} calls in the survey)"
    if ctx.step_boundary != "optimizer.step":
        return (f"{what}: the survey saw no torch.optim optimizer step to unscale and skip"
                + (" (manual parameter updates)" if ctx.step_boundary == "backward" else ""))
    if not ctx.backward_calls:
        return f"{what}: the survey saw no backward call to scale"
    return None


def reset() -> None:
    """Undo :func:`on_model`, :func:`patch_init` and :func:`grad_scaler` (tests; the child process just exits)."""
    from torch import nn

    original = _installed.pop("call", None)
    if original is not None:
        nn.Module.__call__ = original
    _callbacks.clear()
    for cls, own in reversed(_installed.pop("init", [])):
        if own is None:
            del cls.__init__
        else:
            cls.__init__ = own
    for owner, name, value in reversed(_installed.pop("attrs", [])):
        setattr(owner, name, value)
