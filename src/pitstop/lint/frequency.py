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
- ``once``: module-level setup, model surgery, converters, exports, functions called only from there,
  and code under a once-guard (``if i == 0:``, :mod:`pitstop.lint.guards`);
- ``unknown``: a function no linted code is seen to call (a method called only on objects whose class the
  lint cannot resolve, an entry point of another program): never claimed per step.

Calls are resolved by scope, never by name alone (issue 42): a plain call ``run()`` reaches the function
its scope binds ``run`` to (a local or parameter of that name is not it), ``self.run()`` a method of a
class of the file, and ``obj.run()`` (a method of some object: ``callbacks.run(...)``, ``model.train()``)
never a module function of that name; across files, the project index keeps functions and methods apart
and follows a method called on an object only when one class of the project defines it
(:mod:`pitstop.lint.index.callgraph`). Interval guards, predicates named for logging (``if should_log:``) and
guard clauses (``if not should_log: return``) make code every N steps (``epoch``); once-guards make it
``once`` (relative to the loop whose counter they test).

A rule whose advice concerns what every step does, whatever line it points at (an optimizer's
implementation, a layer's size), declares ``runs = "step"``; one whose cost or bug is paid where the
object it reports is used declares ``runs = "use"`` (a DataLoader's workers: the loops that iterate the
loader) or reports with ``runs="pass:..."`` (a sampler without ``set_epoch``: each pass over the loader);
the others take the frequency of the line they report (``runs = "site"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import libcst as cst

from pitstop.lint.index.calltags import function_key, module_stem
from pitstop.lint.frames import Cond, Loop, StepSite
from pitstop.lint.nodes import dotted
from pitstop.lint.walk import children

__all__ = ["Frequencies", "STEP", "EPOCH", "ONCE", "UNKNOWN", "FREQUENCIES", "SEVERITY", "most_frequent",
           "repeating_loop"]

STEP, EPOCH, ONCE, UNKNOWN = "step", "epoch", "once", "unknown"
#: most frequent first: the order of the text output (unknown is never claimed more frequent than a loop shows)
FREQUENCIES = (STEP, EPOCH, UNKNOWN, ONCE)
#: severity follows frequency
SEVERITY = {STEP: "high", EPOCH: "medium", ONCE: "low", UNKNOWN: "low"}

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


def _dotted_names(expr: Any) -> set[str]:
    """The names and attribute chains an expression mentions (``train_loader``, ``self.loader``), lambdas left out."""
    out: set[str] = set()
    stack = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.Name, cst.Attribute)):
            key = dotted(n)
            if key is not None:
                out.add(key)
                continue
        if isinstance(n, cst.Lambda):
            continue
        stack.extend(children(n))
    return out


class Frequencies:
    """Call sites, definitions, loops and bindings recorded during the walk, and the frequency judged from them.
    Needs ``site``, ``current_function``, ``current_class``, ``qualname``, ``source_of``, ``scope``,
    ``function_frames``, ``module_classes``, ``framework_classes``, ``project`` and ``path``."""

    def _init_frequencies(self) -> None:
        self._calls: dict[str, list] = {}  # called name -> [(method call?, Where, Scope of the call)]
        self._defs: dict[Any, Where] = {}  # FunctionDef -> where it is defined
        self._freq: dict[Any, str] = {}
        self._loops: list = []  # (names its iterable mentions, Where of the loop statement, Where in its body)
        self._bindings: dict[Any, set] = {}  # a Call bound by an assignment -> the names it is bound to
        self._bound_args: dict[str, set] = {}  # a bound name -> the names its call's arguments mention
        self._arg_of: dict[Any, Any] = {}  # a Call passed as an argument -> the Call it is passed to
        self._unpacked: dict[str, Any] = {}  # a name bound by unpacking a call (``loss, items = f(x)``) -> the Call
        #: functions whose own body (not a loop of theirs) calls .backward() or an optimizer's .step():
        #: one call is one training step (``train_step``, ``run_step``)
        self.step_bodies: set = set()

    def where(self) -> Where:
        return Where(self.site(), self.current_function(), self.current_class())

    def _record_call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            if self.scope.resolve(func.value) is None:  # a local name, not an import
                self._calls.setdefault(func.value, []).append((False, self.where(), self.scope))
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            self._calls.setdefault(func.attr.value, []).append((True, self.where(), self.scope))
        for a in node.args:
            if isinstance(a.value, cst.Call):
                self._arg_of[a.value] = node

    def _record_def(self, node: cst.FunctionDef) -> None:
        self._defs[node] = self.where()

    def _record_loop(self, iterable: Any, loop: Loop) -> None:
        """A ``for`` loop about to be walked: what it iterates, where it stands and where its body runs."""
        here = self.where()
        body = Where(StepSite((*here.site.frames, loop), here.site.framework_step), here.function, here.cls)
        names = _dotted_names(iterable)
        for name in list(names):  # ``pbar = tqdm(enumerate(train_loader))`` ... ``for i, b in pbar:``
            names |= self._bound_args.get(name, set())
        self._loops.append((frozenset(names), here, body))

    def unpacked_from(self, name: str) -> Any:
        """The call whose result a name was unpacked from (``loss, items = compute_loss(p, t)``), or None."""
        return self._unpacked.get(name)

    def _record_binding(self, call: cst.Call, targets: list) -> None:
        for t in targets:
            if isinstance(t, (cst.Tuple, cst.List)):
                for el in t.elements:
                    if isinstance(el.value, cst.Name):
                        self._unpacked[el.value.value] = call
        names = {k for k in (dotted(t) for t in targets) if k is not None}
        if names:
            self._bindings[call] = names
            mentioned = set().union(*(_dotted_names(a.value) for a in call.args)) if call.args else set()
            for name in names:
                self._bound_args[name] = mentioned

    @property
    def trains(self) -> bool:
        """After the walk: the file trains (a backward or optimizer step, or a framework's training hooks)."""
        return self.trains_here or any(fw for fw in self.framework_classes.values())

    def used_here(self, node: Any) -> bool:
        """After the walk: a loop of this file iterates the object ``node`` (a Call) builds."""
        names = self._use_names(node)
        return any(mentioned & names for mentioned, _, _ in self._loops)

    def _use_names(self, node: Any) -> set:
        names: set = set()
        call = node
        while call is not None:
            names |= self._bindings.get(call, set())
            call = self._arg_of.get(call)
        for _ in range(2):  # handed on by name: ``sampler = ...``, ``loader = DataLoader(ds, sampler=sampler)``
            for bound in list(self._bindings.values()):
                if bound - names and any(self._bound_args.get(b, set()) & names for b in bound):
                    names |= bound
        return names

    def use_frequency(self, node: Any, per_pass: bool, default: str) -> str:
        """How often the object ``node`` (a Call) builds is used: the frequency of the bodies (``per_pass``: of
        the statements) of the loops that iterate it, or the object it is handed to (``DataLoader(ds,
        sampler=sampler)``); ``default`` when no loop of the file does."""
        names = self._use_names(node)
        found = [self._site_frequency(stmt if per_pass else body, 0)
                 for mentioned, stmt, body in self._loops if mentioned & names]
        return most_frequent(*found) if found else default

    def frequency(self, where: Where | None) -> str:
        """How often the code at ``where`` runs (after the walk)."""
        if where is None:
            return STEP
        return self._site_frequency(where, 0)

    def _site_frequency(self, where: Where, depth: int) -> str:
        site = where.site
        once = site.once_guard()
        if once is not None:
            return self._once_frequency(where, once, depth)
        if site.loop() is not None or site.framework_step:
            return EPOCH if site.guarded() else STEP
        if any(isinstance(f, Cond) and f.guard for f in site.frames) and self._function_frequency(
                where.function, where.cls, depth) == STEP:
            return EPOCH
        inner = EPOCH if any(repeating_loop(f, self.source_of) for f in site.frames) else ONCE
        return most_frequent(inner, self._function_frequency(where.function, where.cls, depth))

    def _once_frequency(self, where: Where, once: Cond, depth: int) -> str:
        """Code under ``if i == 0:`` runs once per pass of the loop that binds ``i`` (as often as that loop
        starts); under a test of any other counter (``ni == 0``, ``self.step == 1``), once."""
        frames = where.site.frames
        loops = [f for f in frames[:frames.index(once)] if isinstance(f, Loop) and once.counter in f.targets]
        if not loops:
            return ONCE
        outer = Where(StepSite(frames[:frames.index(loops[-1])], where.site.framework_step), where.function, where.cls)
        found = self._site_frequency(outer, depth + 1)
        return found if found != STEP else EPOCH

    def runs_every_step(self, site: StepSite, fn: Any) -> bool:
        """After the walk: ``site`` (in function ``fn``) runs every training step: in a training loop or a
        framework's per-step method (:meth:`StepSite.per_step`), or in the body of a function that is
        one training step (it calls ``.backward()``/``optimizer.step()`` outside any loop), unguarded."""
        if site.per_step():
            return True
        return fn is not None and (fn in self.step_bodies or self._step_hook(fn)) and not any(
            isinstance(f, (Cond, Loop)) and (not isinstance(f, Cond) or f.guard or f.once) for f in site.frames)

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
            if framework is not None and not self._calls.get(name):
                return ONCE  # the framework's other hooks: setup, configure_optimizers, ...
            if name == "forward" and cls.name.value in self.module_classes or name in ("__getitem__", "__iter__"):
                return STEP
        found, local = ONCE, False
        callers = self._calls.get(name, ())
        if own_class and name == "__init__":  # built where the class is called: ``Dataset(...)``
            callers = [(True, w, sc) for method, w, sc in self._calls.get(cls.name.value, ())
                       if not method and sc.lookup(cls.name.value) is cls]
        for method, where, scope in callers:
            if method != own_class:  # self.name() of any class of the file: subclasses call their bases' methods
                continue
            if not method and scope.lookup(name) is not fn:
                continue  # a plain call of another binding of the name (a parameter, a local, another def)
            local = True
            found = most_frequent(found, self._site_frequency(where, depth + 1))
            if found == STEP:
                return STEP
        if not local and defined is not None and defined.function is not None and not self._calls.get(name):
            found, local = self._site_frequency(defined, depth + 1), True  # a closure handed on: it runs where made
        if not local and self.project is not None:  # called from other files only: their call names
            stem = module_stem(self.path)
            key = function_key(stem, cls.name.value) if own_class and name == "__init__" else \
                f".{name}" if own_class else function_key(stem, name)
            step, repeated = self.project.repeated_names(self.path)
            if key in step:
                return STEP
            if key in repeated:
                return EPOCH
            if self.project.is_called(self.path, key):
                return ONCE
        if local:
            return found
        # nothing linted calls it: a method (called on some object the lint cannot resolve) or a function handed
        # on as a value (``data_processor=process_sample``) runs who knows how often; a function never referenced
        # is an entry point (a command, an API): once per run
        return UNKNOWN if own_class or defined is not None and defined.function is not None or self._referenced(name) \
            else ONCE

    def _referenced(self, name: str) -> bool:
        """The file mentions ``name`` other than by calling or defining it (``fn=name``, ``[name]``, ``name.x``)."""
        text = self.source if self.source is not None else self.module.code
        return re.search(rf"(?<!def )(?<![\w.]){re.escape(name)}\b(?!\s*\()", text) is not None
