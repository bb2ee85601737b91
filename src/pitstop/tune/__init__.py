"""pitstop tune (face K): A/B-measure each trick on the user's own training, keep only what
is faster beyond the noise and still loss-equivalent, and hand back the winning Recipe.

Layout (small modules; nothing here imports torch until a torch-backed name is used):

- ``knob``: :class:`Knob` (base of every tip's knob face), :class:`Context`, :class:`Setting`
- ``search``: the protocol (rounds, noise floor, verdicts, greedy combination, budget)
- ``verdict`` / ``equivalence``: speed-up intervals and the loss-trajectory check
- ``result``: :class:`TuneResult` and its JSON form; ``report``: table, snippet, JSON
- ``script`` (+ ``child``, ``patch``): script mode on the doctor's child-process runner
- ``api`` (+ ``sweep``, ``memory``): API mode through ``make_step``, the batch-size sweep
- ``tuning``: the entry points :func:`tune` and :func:`tune_script`

The package itself is callable: ``pitstop.tune(model, optimizer_factory, loss_fn, loader)``
is :func:`pitstop.tune.tuning.tune` (a subpackage and a function of the same name cannot
otherwise coexist on ``pitstop``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from pitstop.tune.knob import Applicability, Context, Knob, Setting, all_knobs

_LAZY = {
    "TuneOptions": "pitstop.tune.search",
    "TuneError": "pitstop.tune.search",
    "search": "pitstop.tune.search",
    "TuneResult": "pitstop.tune.result",
    "Trial": "pitstop.tune.result",
    "Run": "pitstop.tune.result",
    "tune_script": "pitstop.tune.tuning",
    "ApiBackend": "pitstop.tune.api",
    "ScriptBackend": "pitstop.tune.script",
    "check_losses": "pitstop.tune.equivalence",
}

__all__ = ["tune", "Knob", "Context", "Setting", "Applicability", "all_knobs", *_LAZY]


def __getattr__(name: str) -> Any:
    if name == "tune":
        return sys.modules[__name__]  # the callable package (see below)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pitstop.tune' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _CallableModule(types.ModuleType):
    def __call__(self, model: Any, optimizer_factory: Any, loss_fn: Any, loader: Any, **kwargs: Any):
        from pitstop.tune.tuning import tune as _tune

        return _tune(model, optimizer_factory, loss_fn, loader, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
