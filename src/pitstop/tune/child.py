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

__all__ = ["apply_knob", "set_threads", "TARGET", "THREADS_TARGET", "setup_kwargs"]

TARGET = "pitstop.tune.child:apply_knob"
THREADS_TARGET = "pitstop.tune.child:set_threads"


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
