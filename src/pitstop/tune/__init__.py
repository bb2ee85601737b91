"""pitstop tune (face K): A/B-measure each trick on the user's own training, keep only what
is faster beyond the noise and still loss-equivalent, and hand back the winning Recipe.

Layout (small modules; nothing here imports torch until a torch-backed name is used):

- ``knob``: :class:`Knob` (base of every tip's knob face), :class:`Context`, :class:`Setting`
- ``options``: :class:`TuneOptions`, the budget, the backend protocol
- ``session``: :class:`TuneSession` (options, budget, trials; paired adaptive passes on
  :mod:`pitstop.paired`); ``combine``: its stagewise step (each trick on top of the path so far;
  the path's :class:`Stage` records in ``stages``); ``protocol``: the steps in order
  (:func:`~pitstop.tune.protocol.search`) and the :class:`TuneResult` they make
- ``verdict`` / ``equivalence``: a trial's verdict from its paired interval, the loss-trajectory check
- ``result``: :class:`TuneResult` and its JSON form (rendered by ``report/tune_terminal.py``);
  ``search_info``: its typed settings, budget, script warnings and time split
- ``script`` (+ ``child``, ``patch``, ``warm``): script mode on the doctor's child bootstrap, runs
  forked from a warm worker; ``job``: every run a torchrun job (``--nproc-per-node``)
- ``inprocess`` (+ ``sweep``, ``peak``): API mode (trials in this process) through ``make_step``, the batch-size sweep
- ``api``: the entry points :func:`tune` (``pitstop.tune(...)``) and :func:`tune_script`

The package itself is callable: ``pitstop.tune(model, optimizer_factory, loss_fn, loader)``
is :func:`pitstop.tune.api.tune` (a subpackage and a function of the same name cannot
otherwise coexist on ``pitstop``).
"""

from __future__ import annotations

from pitstop._lazy import lazy_exports, make_callable
from pitstop.tune.knob import Applicability, Context, Knob, Setting, all_knobs

_LAZY = {
    "TuneOptions": "pitstop.tune.options",
    "TuneError": "pitstop.tune.options",
    "TuneSession": "pitstop.tune.session",
    "TuneResult": "pitstop.tune.result",
    "Trial": "pitstop.tune.result",
    "Run": "pitstop.tune.result",
    "tune_script": "pitstop.tune.api",
    "ApiBackend": "pitstop.tune.inprocess",
    "ScriptBackend": "pitstop.tune.script",
    "JobBackend": "pitstop.tune.job",
    "Stage": "pitstop.tune.stages",
    "check_losses": "pitstop.tune.equivalence",
}

__all__ = ["tune", "Knob", "Context", "Setting", "Applicability", "all_knobs", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, itself="tune")
make_callable(__name__, "pitstop.tune.api:tune",
              "Tune an engine training (API mode): see :func:`pitstop.tune.api.tune`.")
