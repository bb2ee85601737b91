"""Lazy package attributes (PEP 562), shared by every ``pitstop`` package ``__init__``.

Torch-backed names are imported on first use, so ``import pitstop`` and ``pitstop lint`` stay
fast and torch-free. A package declares ``_LAZY = {"name": "module.path", ...}`` and::

    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "make_callable"]


def lazy_exports(package: str, names: Mapping[str, str], *, itself: str | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps an attribute to the module
    defining it (imported on first access, then cached on the package). ``itself``: an
    attribute name that returns the package module (a callable package, see :func:`make_callable`)."""

    def __getattr__(name: str) -> Any:
        if itself is not None and name == itself:
            return sys.modules[package]
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        mod = sys.modules[package]
        return sorted(set(vars(mod)) | set(getattr(mod, "__all__", ())))

    return __getattr__, __dir__


def make_callable(package: str, target: str, doc: str) -> None:
    """Make the package module ``package`` itself callable, forwarding to ``target``
    (``"module.path:function"``, imported on the first call): ``pitstop.doctor(step_fn)`` and
    ``pitstop.tune(model, ...)`` are packages and functions at once (a subpackage and a
    function of the same name cannot otherwise coexist on ``pitstop``)."""
    module_name, func_name = target.split(":")

    def __call__(self: types.ModuleType, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module_name), func_name)(*args, **kwargs)

    __call__.__doc__ = doc
    sys.modules[package].__class__ = type("CallablePackage", (types.ModuleType,), {"__call__": __call__, "__doc__": doc})
