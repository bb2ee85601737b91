"""The one setup callable script-mode trials hand to the doctor's bootstrap.

``pitstop.tune.child:apply_knob`` runs in the child process after the instrumentation is
installed and the RNGs are seeded, before the user's script: it imports the module that
defines the knob class (a tip module, or a test's module given by ``path``), builds the
knob and calls its :meth:`~pitstop.tune.knob.Knob.apply_in_child`. The tuner never names
a tip: it only passes the knob class's module and name along.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["apply_knob", "set_threads", "setup_kwargs", "mark_setup", "read_marks", "TARGET", "THREADS_TARGET",
           "MARKS_TARGET"]

TARGET = "pitstop.tune.child:apply_knob"
THREADS_TARGET = "pitstop.tune.child:set_threads"
MARKS_TARGET = "pitstop.tune.child:mark_setup"


def setup_kwargs(knob: Any, value: Any, ctx: Any) -> dict[str, Any]:
    """The JSON-able kwargs of :func:`apply_knob` for ``knob`` set to ``value``."""
    import os

    cls = type(knob)
    module = sys.modules[cls.__module__]
    kwargs: dict[str, Any] = {"module": cls.__module__, "name": cls.__qualname__, "value": value,
                              "options": knob.child_kwargs(value, ctx)}
    if not cls.__module__.startswith("pitstop.") and getattr(module, "__file__", None):
        kwargs["path"] = os.path.dirname(os.path.abspath(module.__file__))
    return kwargs


def apply_knob(module: str, name: str, value: Any, options: dict[str, Any] | None = None,
               path: str | None = None) -> None:
    """Apply one knob in this (child) process."""
    if path and path not in sys.path:
        sys.path.append(path)  # appended: never shadows the script's own modules
    mod = importlib.import_module(module)
    cls = mod
    for part in name.split("."):
        cls = getattr(cls, part)
    cls().apply_in_child(value, **(options or {}))


def set_threads(n: int) -> None:
    """``torch.set_num_threads(n)`` before the script (``pitstop tune --threads N``): the same
    for the baseline and every trial."""
    import torch

    torch.set_num_threads(int(n))


def mark_setup(path: str) -> None:
    """Mark where the run's set-up goes, written to ``path`` as JSON (``time.monotonic`` stamps,
    comparable with the parent's on one machine): ``script`` (now: the script starts next),
    ``imports`` (seconds in the script's top-level ``import`` statements until its first training
    forward), ``forward`` (the first forward of a module in training mode with gradients on) and
    ``step`` (the first optimizer step after it ends). Runs last among the setups; a global
    forward pre-hook and a global optimizer step hook, each removed the first time it fires (so
    nothing of it is left when a script's compiled model is first traced); two small file writes
    inside the first (warm-up) step."""
    import builtins
    import json
    import time

    import torch

    marks: dict[str, float] = {"script": time.monotonic(), "imports": 0.0}
    original = builtins.__import__
    depth = [0]

    def timed_import(*args: Any, **kwargs: Any) -> Any:
        if depth[0]:
            return original(*args, **kwargs)
        depth[0] += 1
        began = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            marks["imports"] += time.monotonic() - began
            depth[0] -= 1

    def write() -> None:
        try:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(marks, f)
        except OSError:
            pass

    def after_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        if "step" not in marks and "forward" in marks:
            marks["step"] = time.monotonic()
            step_hook.remove()
            write()

    def at_forward(module: Any, args: Any) -> None:
        if "forward" in marks or not (module.training and torch.is_grad_enabled()):
            return
        marks["forward"] = time.monotonic()
        forward_hook.remove()
        if builtins.__import__ is timed_import:
            builtins.__import__ = original
        write()

    builtins.__import__ = timed_import
    forward_hook = torch.nn.modules.module.register_module_forward_pre_hook(at_forward)
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:  # a torch without global step hooks: the first step stays unmarked
        return
    step_hook = register_optimizer_step_post_hook(after_step)


def read_marks(path: str) -> dict[str, float]:
    """The marks :func:`mark_setup` wrote (empty when none were)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}
