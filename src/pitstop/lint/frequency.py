"""How often a finding's code runs (issue 31): per training step, per epoch / per evaluation, or once.

Judged from the code's structure after the whole file was walked (:class:`Frequencies`, mixed into
:class:`pitstop.lint.context.FileContext`):

- ``step``: the body of a training loop (a loop calling ``.backward()`` or an optimizer's ``.step()``),
  a method a framework calls once per batch (Lightning ``training_step``, ``on_train_batch_end``, a
  ``transformers`` Trainer's ``compute_loss``, a ``TrainerCallback``'s ``on_step_end``), a model's
  ``forward``, a Dataset's ``__getitem__``, and every function called from those, followed through
  the calls of the file (plain functions and ``self.`` methods, any depth, bounded) and, across the
  linted files, through the project index's call names (``ProjectIndex.repeated_names``, which also gives the names called per epoch);
- ``epoch``: under an interval guard (``if step % N == 0``) of a training loop, in a loop over a
  DataLoader or over epochs/steps that does not train (an evaluation loop), in a framework's
  per-epoch / evaluation hook, or in a function called from there;
- ``once``: everything else (module-level setup, model surgery, converters, exports, functions no
  linted code calls repeatedly).

A rule whose advice concerns what every step does, whatever line it points at (a DataLoader's
workers, an optimizer's implementation, a layer's size), declares ``runs = "step"``; the others
take the frequency of the line they report (``runs = "site"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import libcst as cst

from pitstop.lint.frames import Cond, Loop, StepSite

__all__ = ["Frequencies", "STEP", "EPOCH", "ONCE", "FREQUENCIES", "SEVERITY", "most_frequent", "repeating_loop"]

STEP, EPOCH, ONCE = "step", "epoch", "once"
#: most frequent first: the order of the text output
FREQUENCIES = (STEP, EPOCH, ONCE)
#: severity follows frequency
SEVERITY = {STEP: "high", EPOCH: "medium", ONCE: "low"}

#: methods a framework calls once per training batch (Lightning, HF Trainer and its callbacks)
STEP_HOOKS = frozenset({
    "training_step", "compute_loss", "on_train_batch_start", "on_train_batch_end", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "optimizer_step", "on_step_begin",
    "on_step_end", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step", "backward"})
#: methods a framework calls once per epoch or per evaluation batch
EPOCH_HOOKS = frozenset({
    "validation_step", "test_step", "predict_step", "on_validation_batch_end", "on_validation_batch_start",
    "on_train_epoch_start", "on_train_epoch_end", "on_validation_epoch_end", "on_epoch_end", "on_epoch_begin",
    "on_evaluate", "on_log", "on_save", "prediction_step", "evaluation_loop", "evaluate"})
#: a loop target or iterable that counts epochs or steps: ``for epoch in range(n)``, ``while step < max_steps``
_REPEAT = re.compile(r"epoch|step|iter|batch|loader", re.I)
_DEPTH = 8  # calls followed within a file


def most_frequent(*values: str) -> str:
    return min(values, key=FREQUENCIES.index) if values else ONCE


def repeating_loop(frame: Any, source_of) -> bool:
    """A loop over a DataLoader, or over epochs/steps/batches (by its target or iterable)."""
    if not isinstance(frame, Loop):
        return False
    if frame.over_loader or any(_REPEAT.search(t) for t in frame.targets):
        return True
    node = frame.node
    head = node.iter if isinstance(node, cst.For) else node.test
    return _REPEAT.search(source_of(head)) is not None


@dataclass(frozen=True, eq=False)
class Where:
    """Where a report or a call was made: the step site, the enclosing function and class."""

    site: StepSite
    function: Any  # cst.FunctionDef or None (module level)
    cls: Any  # cst.ClassDef or None


class Frequencies:
    """Call sites and definitions recorded during the walk, and the frequency judged from them.
    Needs ``site``, ``current_function``, ``current_class``, ``qualname``, ``source_of``,
    ``module_classes``, ``framework_classes``, ``project`` and ``path``."""

    def _init_frequencies(self) -> None:
        self._calls: dict[str, list] = {}  # called name -> [(method call?, Where)]
        self._defs: dict[Any, Where] = {}  # FunctionDef -> where it is defined
        self._freq: dict[Any, str] = {}
        #: functions whose own body (not a loop of theirs) calls .backward() or an optimizer's .step():
        #: one call is one training step (``train_step``, ``run_step``)
        self.step_bodies: set = set()

    def where(self) -> Where:
        return Where(self.site(), self.current_function(), self.current_class())

    def _record_call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            if self.scope.resolve(func.value) is None:  # a local name, not an import
                self._calls.setdefault(func.value, []).append((False, self.where()))
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            self._calls.setdefault(func.attr.value, []).append((True, self.where()))

    def _record_def(self, node: cst.FunctionDef) -> None:
        self._defs[node] = self.where()

    def frequency(self, where: Where | None) -> str:
        """How often the code at ``where`` runs (after the walk)."""
        if where is None:
            return STEP
        return self._site_frequency(where, 0)

    def _site_frequency(self, where: Where, depth: int) -> str:
        site = where.site
        if site.loop() is not None or site.framework_step:
            return EPOCH if site.guarded() else STEP
        if any(isinstance(f, Cond) and f.guard for f in site.frames) and self._function_frequency(
                where.function, where.cls, depth) == STEP:
            return EPOCH
        inner = EPOCH if any(repeating_loop(f, self.source_of) for f in site.frames) else ONCE
        return most_frequent(inner, self._function_frequency(where.function, where.cls, depth))

    def runs_every_step(self, site: StepSite, fn: Any) -> bool:
        """After the walk: ``site`` (in function ``fn``) runs every training step: in a training loop or a
        framework's per-step method (:meth:`StepSite.per_step`), or in the body of a function that is
        one training step (it calls ``.backward()``/``optimizer.step()`` outside any loop), unguarded."""
        if site.per_step():
            return True
        return fn is not None and (fn in self.step_bodies or self._step_hook(fn)) and not any(
            isinstance(f, (Cond, Loop)) and (not isinstance(f, Cond) or f.guard) for f in site.frames)

    def _step_hook(self, fn: Any) -> bool:
        """``fn`` is a method a framework calls once per batch (a Lightning hook, a TrainerCallback's
        ``on_step_end``) of a framework class of this file."""
        where = self._defs.get(fn)
        return where is not None and where.cls is not None and where.function is None and \
            fn.name.value in STEP_HOOKS and where.cls.name.value in self.framework_classes

    def function_frequency(self, fn: Any) -> str:
        """How often the function ``fn`` (a FunctionDef of this file) runs."""
        where = self._defs.get(fn)
        return ONCE if where is None else self._function_frequency(fn, where.cls if where.function is None else None, 0)

    def _function_frequency(self, fn: Any, cls: Any, depth: int) -> str:
        if fn is None:
            return ONCE
        known = self._freq.get(fn)
        if known is not None:
            return known
        if depth > _DEPTH:
            return ONCE
        self._freq[fn] = ONCE  # a cycle adds nothing
        found = self._judge_function(fn, cls, depth)
        self._freq[fn] = found
        return found

    def _judge_function(self, fn: cst.FunctionDef, cls: Any, depth: int) -> str:
        name = fn.name.value
        if fn in self.step_bodies:
            return STEP
        defined = self._defs.get(fn)
        own_class = defined is not None and defined.cls is cls and cls is not None and defined.function is None
        if own_class:
            framework = self.framework_classes.get(cls.name.value)
            if framework is not None and name in STEP_HOOKS:
                return STEP
            if framework is not None and name in EPOCH_HOOKS:
                return EPOCH
            if name == "forward" and cls.name.value in self.module_classes or name in ("__getitem__", "__iter__"):
                return STEP
        found, local = ONCE, False
        for method, where in self._calls.get(name, ()):
            if method != own_class:  # self.name() of any class of the file: subclasses call their bases' methods
                continue
            local = True
            found = most_frequent(found, self._site_frequency(where, depth + 1))
            if found == STEP:
                return STEP
        if found == ONCE and defined is not None and defined.function is not None and not self._calls.get(name):
            found = self._site_frequency(defined, depth + 1)  # a closure handed on: it runs where it is made
        if not local and self.project is not None:  # called from other files only: their call names
            step, repeated = self.project.repeated_names(self.path)
            if name in step:
                return STEP
            if name in repeated:
                return most_frequent(found, EPOCH)
        return found
