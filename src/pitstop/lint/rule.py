"""The lint face: :class:`LintRule`, the base class of every static rule (torch-free, cheap).

A tip module subclasses it with ``tip="PITnnn"`` and is registered by
:class:`pitstop.catalog.Face`. A rule is a set of callbacks fed by ONE traversal of each
file: ``visit_<Node>(self, node)`` / ``leave_<Node>(self, node)`` for libcst node class
names (``visit_Call``, ``leave_ClassDef``, ...) and ``finish(self)`` once the file is done.
One instance is made per file, so a rule may keep per-file state in ``self``.

Everything a rule needs to know about the file (qualified names, training loops, interval
guards, "CUDA implied", eval functions, bindings) is asked of ``self.ctx``, a
:class:`pitstop.lint.context.FileContext`; findings are made with :meth:`LintRule.report`.

This module imports neither torch nor libcst: loading the tip catalog stays fast. Rules use
``cst`` and ``nodes`` from here: proxies that import libcst (and the helpers built on it)
on first use.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from pitstop.catalog import Face

if TYPE_CHECKING:  # pragma: no cover
    from pitstop.lint.context import FileContext, FixSpec

__all__ = ["LintRule", "SAFE", "UNSAFE", "cst", "nodes", "scope"]

SAFE, UNSAFE = "safe", "unsafe"

_HOOK = re.compile(r"^(visit|leave)_([A-Z][A-Za-z]*)$")


class _LazyModule:
    """A module imported on first attribute access; later lookups hit the instance dict."""

    def __init__(self, name: str):
        self.__dict__["_name"] = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self.__dict__["_name"]), attr)
        self.__dict__[attr] = value
        return value


#: ``libcst``, imported when a rule first touches it (at lint time, never at catalog load).
cst: Any = _LazyModule("libcst")
#: :mod:`pitstop.lint.nodes` (argument/literal helpers), imported on first use as well.
nodes: Any = _LazyModule("pitstop.lint.nodes")
#: :mod:`pitstop.lint.scope` (which loader is a training loader), imported on first use.
scope: Any = _LazyModule("pitstop.lint.scope")


class LintRule(Face, face="L"):
    """Base of the static rules. Subclasses set ``message`` and implement callbacks.

    Class attributes:

    - ``message``: the default message (one sentence, what is wrong and what to do).
    - ``fix``: the best fix applicability the rule offers: ``"safe"``, ``"unsafe"`` or ``None``.
    - ``in_tests`` / ``dummy_models``: False to stay silent in unit tests / dummy models.
    """

    message: ClassVar[str] = ""
    fix: ClassVar[str | None] = None
    #: False for rules about training/evaluation speed: silent in unit tests (``test_*.py``,
    #: ``Test*.test_*``), which build loaders, models and loops to check behaviour, not to run fast
    in_tests: ClassVar[bool] = True
    #: False for rules about model design: silent inside deliberate dummy models (``BoringModel``,
    #: ``DummyModel``, ``ToyNet``: classes/functions named dummy/boring/toy/mock/fake/placeholder)
    dummy_models: ClassVar[bool] = True
    #: how often a finding's code runs (:mod:`pitstop.lint.frequency`): ``"site"``, that of the reported
    #: line; ``"step"``, every step whatever the line (a layer's size, an optimizer's implementation: set
    #: up once, paid every step); ``"use"``, that of the loops that use the object the reported call
    #: builds (a DataLoader's workers and pinning are paid per batch of the loop that iterates it; a
    #: sampler's missing ``set_epoch`` per epoch of it), ``use_default`` when no such loop is in the file
    runs: ClassVar[str] = "site"
    use_default: ClassVar[str] = "step"
    #: what the rule is about (:data:`pitstop.lint.findings.CONCERNS`): only ``"cost"`` findings are hidden
    #: from the default view when their code runs once; wrong results, unsafe loads and deprecated calls
    #: are shown whatever their frequency
    concern: ClassVar[str] = "cost"
    #: node class name -> (visit method names, leave method names); filled per subclass
    hooks: ClassVar[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        hooks: dict[str, tuple[list[str], list[str]]] = {}
        for attr in dir(cls):
            m = _HOOK.match(attr)
            if m:
                visit, leave = hooks.setdefault(m[2], ([], []))
                (visit if m[1] == "visit" else leave).append(attr)
        cls.hooks = {k: (tuple(v), tuple(lv)) for k, (v, lv) in hooks.items()}
        if cls.tip and not cls.message:
            raise TypeError(f"{cls.__qualname__}: a lint rule needs a message")
        if cls.runs not in ("site", "step", "use") or cls.use_default not in ("step", "epoch"):
            raise ValueError(f"{cls.__qualname__}: runs must be 'site', 'step' or 'use' (use_default 'step' or 'epoch')")
        if cls.concern not in ("cost", "correctness", "security", "deprecation"):
            raise ValueError(f"{cls.__qualname__}: concern must be cost, correctness, security or deprecation")
        if cls.fix not in (None, SAFE, UNSAFE):
            raise ValueError(f"{cls.__qualname__}: fix must be 'safe', 'unsafe' or None")

    def __init__(self, ctx: FileContext):
        self.ctx = ctx

    @property
    def code(self) -> str:
        return self.tip

    def report(self, node: Any, message: str | None = None, *, fix: FixSpec | None = None,
               when: Callable[[], bool] | None = None, function: Any = None, pattern: str = "",
               use: Any = None, runs: str | None = None) -> None:
        """Report ``node``; ``when`` (evaluated after the whole file was seen) can veto it; ``function``:
        the FunctionDef the finding is about (a decorator, a name), whose frequency it takes; ``pattern``:
        the rule's sub-pattern that matched ("" for its main one), measured and defaulted on its own
        (:mod:`pitstop.lint.defaults`); ``use``: with ``runs = "use"``, the call whose object's uses
        give the frequency (default ``node``); ``runs``: this report's own (``"pass:epoch"``: as often as a loop
        over the object starts, ``"epoch"`` when none is found)."""
        if not self.in_tests and self.ctx.in_unit_test() or not self.dummy_models and self.ctx.in_dummy_model():
            return
        runs = runs or (self.runs if self.runs != "use" else f"use:{self.use_default}")
        self.ctx.report(self.tip, node, message or self.message, fix, when, runs, function, pattern, self.concern,
                        use if use is not None else node)

    def finish(self) -> None:
        """Called once after the traversal, for rules that decide on the whole file."""
