"""What the single traversal knows about where it is: scopes, loops, conditions, with-blocks.

Frames live on one stack in :class:`pitstop.lint.context.FileContext`. A :class:`Scope`
resolves names through imports and aliases (``import torch as T``, ``from torch import nn``)
and remembers the last value bound to each name; a :class:`Loop` collects what makes it a
training loop while its body is walked, so per-step rules decide once the file is done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Scope", "Loop", "Cond", "WithBlock", "StepSite", "OPTIMIZER_NAME", "ACCUMULATION_NAME"]

#: ``<name>.step()`` counts as an optimizer step when ``name`` looks like an optimizer.
OPTIMIZER_NAME = re.compile(r"(^|_)(opt|optim|optimizer|optimiser)s?(\d*)($|_)|optimi[sz]er")


class Scope:
    """A module, class, function or lambda scope."""

    __slots__ = ("kind", "node", "parent", "imports", "values")

    def __init__(self, kind: str, node: Any, parent: Scope | None):
        self.kind = kind  # "module" | "class" | "function" | "lambda"
        self.node = node
        self.parent = parent
        self.imports: dict[str, str] = {}  # local name -> qualified name
        self.values: dict[str, Any] = {}  # local name -> last bound expression (None: unknown)

    def bind(self, name: str, value: Any = None) -> None:
        self.imports.pop(name, None)
        self.values[name] = value

    def bind_import(self, name: str, qualified: str) -> None:
        self.values.pop(name, None)
        self.imports[name] = qualified

    def resolve(self, name: str) -> str | None:
        """Qualified name of ``name`` as seen from this scope (None: local or unknown)."""
        scope: Scope | None = self
        first = True
        while scope is not None:
            if first or scope.kind != "class":  # class bodies are not enclosing scopes
                if name in scope.imports:
                    return scope.imports[name]
                if name in scope.values:
                    return None
            first = False
            scope = scope.parent
        return None

    def lookup(self, name: str, same_scope: bool = False) -> Any:
        """The expression last bound to ``name`` (this scope, then enclosing ones)."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            if name in scope.imports or same_scope:
                return None
            scope = scope.parent
        return None


@dataclass(eq=False)
class Loop:
    """A ``for``/``while`` loop of the current function, filled while its body is walked."""

    node: Any
    scope: Scope
    targets: frozenset[str] = frozenset()
    over_loader: bool = False
    backward_calls: list = field(default_factory=list)  # (call, receiver expression)
    steps: list = field(default_factory=list)  # (call, conditional: bool)
    step_tests: list = field(default_factory=list)  # the tests of the ``if``s between the loop and its steps

    @property
    def training(self) -> bool:
        """Its body (if/with/try blocks included, nested loops and functions excluded)
        calls ``.backward()`` or an optimizer's ``.step()``."""
        return bool(self.backward_calls or self.steps)

    @property
    def conditional_step(self) -> bool:
        """Some optimizer step runs under an accumulation-like condition (see :class:`Cond`)."""
        return any(cond for _, cond in self.steps)


#: a name in an ``if`` test that says "accumulation boundary" (``sync_gradients``, ``is_accumulating``)
ACCUMULATION_NAME = re.compile(r"accum|sync|boundary|micro|update|step|iter|batch_idx", re.I)


@dataclass(eq=False)
class Cond:
    node: Any
    #: runs every N steps: the body of an ``if`` whose test contains ``%`` or names a periodic predicate
    #: (``if should_log:``), or the rest of a block after a periodic guard clause (:mod:`pitstop.lint.guards`)
    guard: bool
    orelse: bool = False
    #: the test can be an accumulation boundary: ``%``, an accumulation-like name, or a target of
    #: the enclosing loop (``if i == last``); a config switch (``if args.use_optimizer``) is not
    accumulation: bool = True
    #: runs once per pass of the loop whose counter it tests: the body of ``if i == 0:`` (the counter's
    #: name in ``counter``), or the rest of a block after ``if i != 0: continue``
    once: bool = False
    counter: str = ""
    #: the frame stands for the rest of a block after a guard clause (``if not should_log: return``)
    clause: bool = False


@dataclass(eq=False)
class WithBlock:
    node: Any
    calls: tuple = ()  # the Call nodes of its items


@dataclass(frozen=True, eq=False)
class StepSite:
    """A snapshot of the frames around a node, judged once the file has been walked.

    ``framework_step``: the node is in a method a framework calls once per training step
    (``training_step``/``forward`` of a LightningModule, ``compute_loss``/``training_step`` of a
    ``transformers.Trainer`` subclass): per-step code without a loop of its own."""

    frames: tuple
    framework_step: bool = False

    def loop(self) -> Loop | None:
        """The outermost enclosing training loop of the current function, if any."""
        for f in self.frames:
            if isinstance(f, Loop) and f.training:
                return f
        return None

    def inner_loop(self) -> Loop | None:
        """The innermost enclosing training loop."""
        for f in reversed(self.frames):
            if isinstance(f, Loop) and f.training:
                return f
        return None

    def guarded(self) -> bool:
        """Under an interval guard (``if step % N == 0:``) inside the training loop (or the
        framework's step method)."""
        loop = self.loop()
        if loop is None:
            return self.framework_step and any(isinstance(f, Cond) and f.guard for f in self.frames)
        idx = self.frames.index(loop)
        return any(isinstance(f, Cond) and f.guard for f in self.frames[idx + 1:])

    def conditional(self, loop: Loop, accumulation: bool = False) -> bool:
        """Under any ``if``/``else`` between ``loop`` and the node (``accumulation``: under one
        whose test can be an accumulation boundary)."""
        idx = self.frames.index(loop)
        return any(isinstance(f, Cond) and (f.accumulation or not accumulation) for f in self.frames[idx + 1:])

    def once_guard(self) -> Cond | None:
        """The outermost once-guard (``if i == 0:``) around the node, if any."""
        for f in self.frames:
            if isinstance(f, Cond) and f.once:
                return f
        return None

    def per_step(self) -> bool:
        """In a training loop (or a framework's per-step method), not under an interval guard nor a
        once-guard."""
        return (self.loop() is not None or self.framework_step) and not self.guarded() and self.once_guard() is None
