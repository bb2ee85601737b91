"""Precision plugins, in the shape of Lightning Fabric's: one small object per precision.

Each plugin answers four questions for the step: which context the forward and the loss run
in (``forward_context``), how to run backward (``backward``), what to do before the gradients
are read or clipped (``unscale``), and how to step the optimizer (``optimizer_step``). The
fp32 plugin's hooks do nothing extra, so the plain step pays nothing for the others.

Process-wide backend flags (TF32, cuDNN benchmark, deterministic algorithms) are set by
:class:`BackendFlags` and put back by its ``restore()``: a trial of ``tune`` must not leak
TF32 into the next one.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

__all__ = ["Precision", "TF32Precision", "MixedPrecision", "FP16MixedPrecision", "make_precision", "BackendFlags"]


class Precision:
    """fp32: no autocast, no scaler."""

    name = "fp32"
    scaler: torch.amp.GradScaler | None = None

    def __init__(self, device_type: str = "cpu"):
        self.device_type = device_type

    def forward_context(self) -> contextlib.AbstractContextManager:
        """The context the forward pass and the loss run in (never the backward, PIT305)."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Called once per optimizer step, before clipping (PIT303). fp32: nothing to do."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def set_flags(self, flags: BackendFlags) -> None:
        """Process-wide switches this precision needs (TF32 for ``tf32``)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class TF32Precision(Precision):
    """fp32 tensors, TF32 tensor-core math for matmuls and convolutions (NVIDIA Ampere+;
    no effect on CPU, PIT304)."""

    name = "tf32"

    def set_flags(self, flags: BackendFlags) -> None:
        flags.set_matmul_precision("high")
        flags.set(torch.backends.cudnn, "allow_tf32", True)


class MixedPrecision(Precision):
    """bf16 (or fp16) autocast on the forward and the loss only; no scaler for bf16."""

    name = "bf16-mixed"
    dtype = torch.bfloat16

    def __init__(self, device_type: str = "cpu"):
        super().__init__(device_type)
        # one autocast object, re-entered every step (entering saves the previous state on it)
        self._autocast = torch.autocast(device_type=device_type, dtype=self.dtype)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return self._autocast


class FP16MixedPrecision(MixedPrecision):
    """fp16 autocast + ``torch.amp.GradScaler`` (on CPU too): the loss is scaled before
    backward, gradients are unscaled before clipping, and a step whose gradients hold inf/NaN
    is skipped and the scale lowered."""

    name = "fp16-mixed"
    dtype = torch.float16

    def __init__(self, device_type: str = "cpu", scaler: torch.amp.GradScaler | None = None):
        super().__init__(device_type)
        self.scaler = scaler if scaler is not None else torch.amp.GradScaler(device_type)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.step(optimizer)  # skipped when unscale_ found inf/NaN (reads one flag: a sync)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


_PLUGINS = {p.name: p for p in (Precision, TF32Precision, MixedPrecision, FP16MixedPrecision)}


def make_precision(name: str, device_type: str, scaler: torch.amp.GradScaler | None = None) -> Precision:
    """The plugin for ``Recipe.precision``."""
    cls = _PLUGINS[name]
    if cls is FP16MixedPrecision:
        return cls(device_type, scaler=scaler)
    return cls(device_type)


class BackendFlags:
    """Sets process-wide torch flags and remembers the previous values for :meth:`restore`."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, ...]] = []

    def set(self, obj: Any, attr: str, value: Any) -> None:
        self._undo.append(("attr", obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    def set_matmul_precision(self, value: str) -> None:
        self._undo.append(("matmul", torch.get_float32_matmul_precision()))
        torch.set_float32_matmul_precision(value)

    def set_deterministic(self, value: bool) -> None:
        self._undo.append(("det", torch.are_deterministic_algorithms_enabled(),
                           torch.is_deterministic_algorithms_warn_only_enabled()))
        torch.use_deterministic_algorithms(value)

    def set_threads(self, value: int) -> None:
        self._undo.append(("threads", torch.get_num_threads()))
        torch.set_num_threads(value)

    def restore(self) -> None:
        for entry in reversed(self._undo):
            if entry[0] == "attr":
                setattr(entry[1], entry[2], entry[3])
            elif entry[0] == "matmul":
                torch.set_float32_matmul_precision(entry[1])
            elif entry[0] == "threads":
                torch.set_num_threads(entry[1])
            else:
                torch.use_deterministic_algorithms(entry[1], warn_only=entry[2])
        self._undo.clear()
