"""Full fp32 arithmetic for a numerical check: TF32 (and oneDNN bf16) off, autocast off.

On an Ampere+ GPU, cuDNN runs fp32 convolutions in TF32 by default (10-bit mantissa,
relative rounding ~5e-4), and ``set_float32_matmul_precision("high")`` does the same for
matmuls. A check that two fp32 computations agree (a folded model against the original,
PIT606) then sees that rounding, on both sides, and not the algebra it means to test.
:func:`full_fp32` runs a block in IEEE fp32 and puts every flag back afterwards.

torch >= 2.9 has per-backend ``fp32_precision`` settings; reading or setting the legacy
``allow_tf32`` flags after a user set the new ones raises, so the new ones are used when
they exist (they are consistent with either API having been used before).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["full_fp32", "FP32_SETTINGS"]

#: (backend path, attribute) pairs set to IEEE fp32 by :func:`full_fp32` (torch >= 2.9).
FP32_SETTINGS: tuple[tuple[str, str], ...] = (
    ("cuda.matmul", "fp32_precision"),
    ("cudnn.conv", "fp32_precision"),
    ("cudnn.rnn", "fp32_precision"),
    ("mkldnn.matmul", "fp32_precision"),
    ("mkldnn.conv", "fp32_precision"),
    ("mkldnn.rnn", "fp32_precision"),
)


def _backend(path: str) -> Any:
    obj: Any = torch.backends
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _new_api() -> list[tuple[Any, str]]:
    found = []
    for path, attr in FP32_SETTINGS:
        obj = _backend(path)
        if obj is not None and hasattr(obj, attr):
            found.append((obj, attr))
    return found


@contextlib.contextmanager
def full_fp32(device_type: str = "cpu") -> Iterator[None]:
    """Run the block in IEEE fp32: TF32 / reduced-precision fp32 off for matmuls and
    convolutions, autocast off on ``device_type``; the previous settings are restored on exit
    (also when the block raises)."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        settings = _new_api()
        if settings:
            for obj, attr in settings:
                undo.append((obj, attr, getattr(obj, attr)))
                setattr(obj, attr, "ieee")
        else:  # torch < 2.9: the legacy switches
            undo.append((None, "matmul", torch.get_float32_matmul_precision()))
            torch.set_float32_matmul_precision("highest")
            for obj in (torch.backends.cuda.matmul, torch.backends.cudnn):
                undo.append((obj, "allow_tf32", obj.allow_tf32))
                obj.allow_tf32 = False
        with torch.autocast(device_type=device_type, enabled=False):
            yield
    finally:
        for obj, attr, value in reversed(undo):
            if obj is None:
                torch.set_float32_matmul_precision(value)
            else:
                setattr(obj, attr, value)
