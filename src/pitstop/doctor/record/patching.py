"""Reversible monkey-patches and call-site lookup for the instrumentation."""

from __future__ import annotations

import os
import sys
from typing import Any

from pitstop.doctor.record.frameworks import framework_file, resolve_site

__all__ = ["Patches", "user_site", "site_via", "internal_dirs", "as_method", "compiling", "compiling_check"]

_DOCTOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MISSING = object()


def compiling_check() -> Any:
    """The function that is True while TorchDynamo traces the calling code
    (``torch.compiler.is_compiling``, torch >= 2.3; ``torch._dynamo.is_compiling`` before).
    Every hook and patch of the doctor returns at once when it is true: dynamo then traces a
    constant and nothing of the doctor enters the user's graphs (no graph breaks, no guards on
    the doctor's state, no recompiles). Recorders bind it once (0.2 us a call)."""
    import torch

    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if check is None:  # torch < 2.3
        from torch._dynamo import is_compiling as check
    return check


def compiling() -> bool:
    """:func:`compiling_check`, looked up on each call."""
    return compiling_check()()


def internal_dirs() -> tuple[str, ...]:
    import torch

    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)


_TORCH_DIRS: tuple[str, ...] | None = None
#: torch files a user call passes through on its way to a sync (``f"{loss:.4f}"`` calls
#: ``Tensor.__format__`` which calls ``.item()``; ``print(t)`` formats through _tensor_str).
_PASS_THROUGH_NAMES = ("_tensor.py", "_tensor_str.py")


def user_site(depth: int = 2, *, through_torch: bool = False) -> str | None:
    """``"file:line"`` of the user code that caused the current call, or None when torch's
    own code made it (an optimizer reading a step counter is not the user's sync).

    ``through_torch=True`` walks past every torch frame instead (for forward call sites,
    which always arrive through ``Module.__call__``). Frames of training frameworks
    (Lightning, transformers, accelerate) are walked past to the user's own line
    (:func:`pitstop.doctor.record.frameworks.resolve_site`).
    """
    found = site_via(depth + 1, through_torch=through_torch)
    if found is None:
        return None
    where, via = found
    return via or where


def site_via(depth: int = 2, *, through_torch: bool = False) -> tuple[str, str | None] | None:
    """``(where, via)``: like :func:`user_site`, but when the call came through a training
    framework's frames, ``where`` is the framework's line that made it
    (``transformers/trainer.py:1922``) and ``via`` the user's line that leads there
    (``trainer.train()``); else ``(user line, None)``. None when torch's own code made it."""
    global _TORCH_DIRS
    if _TORCH_DIRS is None:
        _TORCH_DIRS = internal_dirs()
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    via_framework, first_framework = False, None
    while f is not None:
        fn = f.f_code.co_filename
        if fn.startswith(_DOCTOR_DIR) or fn.startswith("<frozen"):
            f = f.f_back
            continue
        if fn.startswith(_TORCH_DIRS):
            if through_torch or via_framework or (fn.endswith(_PASS_THROUGH_NAMES) and os.path.dirname(fn) + os.sep in _TORCH_DIRS):
                f = f.f_back
                continue
            return None
        if fn.endswith(("contextlib.py", "functools.py")):
            f = f.f_back
            continue
        if framework_file(fn):  # Lightning/HF/Accelerate code: the user's line is further out
            resolved = resolve_site(f)
            if resolved:  # the user's line that caused it (Lightning's self.log(..., prog_bar=True))
                return resolved, None
            if not via_framework:
                first_framework = f"{fn}:{f.f_lineno}"
            via_framework = True  # torch frames further out are the framework's calls, not the cause
            f = f.f_back
            continue
        here = f"{fn}:{f.f_lineno}"
        return (first_framework, here) if first_framework else (here, None)
    return (first_framework, None) if first_framework else None  # the whole stack was framework code


def as_method(bound: Any) -> Any:
    """A plain function around a bound method, so that it binds ``self`` when set on a class."""
    def method(*args: Any, **kwargs: Any) -> Any:
        return bound(*args, **kwargs)
    method.__wrapped__ = bound  # type: ignore[attr-defined]
    return method


class Patches:
    """Set attributes and put back exactly what was there (an inherited attribute is
    removed again rather than copied onto the subclass)."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> Any:
        """Replace ``owner.name``; return the original (looked up, possibly inherited)."""
        original = getattr(owner, name)
        own = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        self._saved.append((owner, name, own))
        setattr(owner, name, value)
        return original

    def restore(self) -> None:
        while self._saved:
            owner, name, own = self._saved.pop()
            if own is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, own)
