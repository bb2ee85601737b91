"""One traversal of one file, feeding every selected rule: :class:`FileContext`.

FileContext is the composition of four parts, each in its own module:

- :class:`pitstop.lint.walk.FileWalk`: the tree walk, the frames (scopes, loops, ``if``/``with``
  blocks) and the file-wide facts collected on the way (training loops, "CUDA implied", nn.Module
  classes);
- :class:`pitstop.lint.position.Position` and :class:`pitstop.lint.facts.FileFacts`: facts about
  the file and the place being visited (``qualname``, ``call_name``, ``loop``, ``site``,
  ``value_of``, ``device_implied``, ``dataset_kind``, ...) and :class:`pitstop.lint.dataflow.DataFlow`:
  values and call targets followed within the linted files (``constant``, ``argparse_default``,
  ``sync_chain``);
- :class:`pitstop.lint.matchers.Matchers`: the questions rules ask of nodes (``is_optimizer``,
  ``is_model_call``, ``grad_mode``, ...);
- :class:`pitstop.lint.sink.ReportSink`: what rules emit (``report``, ``fix``, ``source_of``).
  A report may carry a ``when`` predicate that is judged after the whole file was seen (a loop
  is a training loop only once its ``.backward()`` was found).

Rules see one object, ``self.ctx``; every name they used before the split still works.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from pitstop.lint.dataflow import DataFlow
from pitstop.lint.facts import FileFacts
from pitstop.lint.frequency import Frequencies
from pitstop.lint.frames import Scope
from pitstop.lint.matchers import AUTOCASTS, DATALOADER, DDP, MODULE_BASES, Matchers, is_test_file, loss_names
from pitstop.lint.position import Position
from pitstop.lint.sink import FixSpec, Pending, ReportSink
from pitstop.lint.walk import FileWalk, children, find

__all__ = ["FileContext", "FixSpec", "Pending", "DATALOADER", "DDP", "MODULE_BASES", "AUTOCASTS", "children", "find",
           "loss_names"]


class FileContext(FileWalk, Position, Matchers, FileFacts, DataFlow, Frequencies, ReportSink):
    """What rules can ask about the file being linted; see the module docstring."""

    def __init__(self, module: cst.Module, rule_classes: list[type], filename: str = "", project: Any = None,
                 path: str | None = None, source: str | None = None):
        self.module = module
        self.source = source
        self._no_grad: frozenset | None = None
        self.framework_classes: dict[str, str] = {}
        self._info: Any = None
        self._device: bool | None = None
        self.filename = filename
        self.path = path if path is not None else filename
        #: :class:`pitstop.lint.index.project.ProjectIndex` of every linted file, or None (one file alone)
        self.project = project
        self.test_file = is_test_file(filename) or (project is not None and project.in_test_folder(self.path))
        self.rules = [cls(self) for cls in rule_classes]
        self.pending: list[Pending] = []
        self.walked = False
        self._init_frequencies()
        self.stack: list[Any] = []
        self.ancestors: list[cst.CSTNode] = []
        self.scope: Scope = Scope("module", module, None)
        self.cuda_implied = False
        #: the file trains: it calls ``.backward()`` or an optimizer's ``.step()`` somewhere (judged after the walk)
        self.trains_here = False
        self.module_classes: set[str] = set()
        self._hooks: dict[str, tuple[list, list]] = {}
        for rule in self.rules:
            for name, (visits, leaves) in type(rule).hooks.items():
                v, lv = self._hooks.setdefault(name, ([], []))
                v.extend(getattr(rule, m) for m in visits)
                lv.extend(getattr(rule, m) for m in leaves)
        self._dispatch_tables()
