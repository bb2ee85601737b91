"""Values and call targets the lint can follow within the linted files (:class:`DataFlow`, mixed
into :class:`pitstop.lint.context.FileContext`): facts about the file.

- :meth:`DataFlow.constant`: the value of an expression when the file fixes it: a literal
  (``0``, ``1e-2``, ``False``), a module-level name bound once to a literal (``VOCAB = 50257``),
  or an argparse option read as ``args.<dest>`` whose ``add_argument`` in this file gives the
  default (``default=0``; ``action="store_true"`` means False). Two ``add_argument`` calls for
  one dest with different defaults make it unknown. The default is what runs when the option is
  not passed: a finding built on it says so.
- :meth:`DataFlow.sync_chain`: for a call of a function of the linted files (``get_sigmas(t)``,
  ``self._log(loss)``, ``timer.stop()``), the chain of calls down to a sync with the device (``.item()``,
  ``.tolist()``, ``.numpy()``, ``torch.cuda.synchronize()``), any depth up to a bound, from the
  project index's call graph (:mod:`pitstop.lint.index.callgraph`).

Needs ``module``, ``scope``, ``info``, ``project``, ``path`` and ``current_class`` from the
class it is mixed into.
"""

from __future__ import annotations

import os
from typing import Any

import libcst as cst

from pitstop.lint.index.callgraph import sync_chain
from pitstop.lint.index.calltags import function_key
from pitstop.lint.nodes import kwarg, number_value, string_value

__all__ = ["DataFlow", "NOTHING", "ArgDefault"]

#: what :meth:`DataFlow.constant` returns when the value is not known
NOTHING: Any = type("Nothing", (), {"__repr__": lambda self: "NOTHING", "__bool__": lambda self: False})()
_CONFLICT = object()
#: receivers of parsed options: ``args.x``, ``self.args.x``, ``opt.x``, ``config.x`` (never ``self.x``)
_NOT_OPTIONS = frozenset({"self", "cls", "torch", "nn", "np", "math", "os", "sys"})


class ArgDefault:
    """An argparse default: ``value`` and the option that sets it (``--dataloader_num_workers``)."""

    __slots__ = ("value", "option")

    def __init__(self, value: Any, option: str):
        self.value, self.option = value, option

    def __repr__(self) -> str:
        return f"ArgDefault({self.value!r}, {self.option!r})"


def _literal(expr: cst.BaseExpression | None) -> Any:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    n = number_value(expr)
    if n is not None:
        return int(n) if isinstance(expr, cst.Integer) or (
            isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, cst.Integer)) else n
    s = string_value(expr)
    return NOTHING if s is None else s


def _option_dest(call: cst.Call) -> tuple[str, str] | None:
    """(dest, option as written) of an ``add_argument`` call; None for positionals without dest."""
    d = kwarg(call, "dest")
    names = [string_value(a.value) for a in call.args if a.keyword is None]
    names = [n for n in names if n]
    longs = [n for n in names if n.startswith("--")]
    option = longs[0] if longs else (names[0] if names else "")
    if d is not None:
        dest = string_value(d.value)
        return (dest, option) if dest else None
    if longs:
        return longs[0][2:].replace("-", "_"), option
    if names and names[0].startswith("-"):
        return names[0].lstrip("-").replace("-", "_"), option
    return (names[0], option) if names else None


def _argparse_defaults(module: cst.Module) -> dict:
    out: dict = {}
    stack: list = [module]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "add_argument":
            spec = _option_dest(n)
            if spec is not None:
                dest, option = spec
                default = kwarg(n, "default")
                action = string_value(kwarg(n, "action").value) if kwarg(n, "action") is not None else None
                if default is not None:
                    value = _literal(default.value)
                elif action in ("store_true", "store_false"):
                    value = action == "store_false"
                else:
                    value = None if action in (None, "store") and kwarg(n, "required") is None else NOTHING
                    if kwarg(n, "nargs") is not None:
                        value = NOTHING
                old = out.get(dest)
                out[dest] = ArgDefault(value, option) if old is None or (
                    old is not _CONFLICT and old.value == value) else _CONFLICT
            continue
        stack.extend(c for c in n.children if isinstance(c, cst.CSTNode))
    return {k: v for k, v in out.items() if v is not _CONFLICT and v.value is not NOTHING}


class DataFlow:
    """Constant values and call targets the file pins down; see the module docstring."""

    _argparse: dict | None = None

    def argparse_default(self, expr: cst.BaseExpression | None) -> ArgDefault | None:
        """The default of the option ``expr`` reads (``args.num_workers``), or None."""
        if not isinstance(expr, cst.Attribute):
            return None
        owner = expr.value
        if isinstance(owner, cst.Name):
            if owner.value in _NOT_OPTIONS or self.qualname(owner) is not None:
                return None
        elif not (isinstance(owner, cst.Attribute) and owner.attr.value in ("args", "opt", "opts", "hparams")):
            return None
        if self._argparse is None:
            self._argparse = _argparse_defaults(self.module) if "add_argument" in (self.source or "add_argument") else {}
        return self._argparse.get(expr.attr.value)

    def constant(self, expr: cst.BaseExpression | None) -> Any:
        """The value ``expr`` has when the file pins it (see the module docstring), else NOTHING."""
        value = _literal(expr)
        if value is not NOTHING or expr is None:
            return value
        if isinstance(expr, cst.Name):
            bound = self.value_of(expr)
            if bound is not None and self._module_constant(expr.value):
                return _literal(bound)
            return NOTHING
        d = self.argparse_default(expr)
        return NOTHING if d is None else d.value

    def _module_constant(self, name: str) -> bool:
        """``name`` is bound once, at module level, and nowhere else in the file's scopes on the way."""
        scope = self.scope
        while scope is not None and scope.kind != "module":
            if name in scope.values:
                return False
            scope = scope.parent
        return scope is not None and self.info.assigned_once(name)

    def sync_chain(self, call: cst.Call) -> tuple[list[str], int, str, bool] | None:
        """The calls from ``call`` down to a sync with the device, when ``call`` calls a function of the
        linted files (this file's, a ``self.`` method, one imported from a linted sibling, or a method of an
        object whose name one linted function of the project has) whose body, or a function it calls up to
        :data:`pitstop.lint.index.callgraph.MAX_DEPTH` deep, syncs: (chain of ``Class.name`` labels ending in
        the sync, e.g. ``["Timer.stop", "synchronize"]``; line of the sync; ``item``/``tolist``/``numpy``/
        ``cpu``/``synchronize``; whether that line is in this file). Else None."""
        mine = self.project.modules.get(os.path.abspath(self.path)) if self.project is not None else None
        func, here = call.func, (mine or self.info).calls  # the project's own copy: one definition per function
        infos = self.project.call_infos(self.path) if self.project is not None else [here]
        method = False
        if isinstance(func, cst.Name):
            name = function_key(here.stem, func.value)
            if self.qualname(func) is not None or name not in here.calls:
                imported = self.info.imports.get(func.value)
                target = self.project.module_of(self.path, imported[0]) if imported and self.project else None
                if target is None:
                    return None
                here = target.calls
                name = function_key(here.stem, imported[1])
        elif isinstance(func, cst.Attribute):
            name = func.attr.value
            receiver = func.value
            if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
                name = "@" + name  # a method of the caller's class (its file first)
            else:
                module = self.qualname(receiver)
                if module is not None:  # utils.clip_gradients(...): a linted module of the project, or a library
                    target = self.project.module_of(self.path, module) if self.project is not None else None
                    if target is None:
                        return None
                    here = target.calls
                    name = function_key(here.stem, name)
                elif isinstance(receiver, cst.Name) and receiver.value in _NOT_OPTIONS:
                    return None
                else:
                    name, method = "." + name, True  # a method of some object: never a module function
        else:
            return None
        def argument(position: int, param: str) -> str | None:
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == param:
                    return self.module.code_for_node(arg.value)
            plain = [a for a in call.args if a.keyword is None and not a.star]
            return self.module.code_for_node(plain[position].value) if position < len(plain) else None

        found = sync_chain(name, here, infos if here in infos else infos + [here], method, argument)
        if found is None:
            return None
        chain, line, what, info = found
        return chain, line, what, info is (mine or self.info).calls
