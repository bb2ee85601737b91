"""Values and call targets the lint can follow within the linted files (:class:`DataFlow`, mixed
into :class:`pitstop.lint.context.FileContext`): facts about the file.

- :meth:`DataFlow.constant`: the value of an expression when the file fixes it: a literal
  (``0``, ``1e-2``, ``False``), a module-level name bound once to a literal (``VOCAB = 50257``),
  or an argparse option read as ``args.<dest>`` whose ``add_argument`` in this file gives the
  default (``default=0``; ``action="store_true"`` means False). Two ``add_argument`` calls for
  one dest with different defaults make it unknown. The default is what runs when the option is
  not passed: a finding built on it says so.
- :meth:`DataFlow.sync_helper`: for a call of a function of this file or of a linted sibling file
  (``get_sigmas(t)``, ``self._log(loss)``, ``helper(x)`` imported from a sibling), the host read
  (``.item()``, ``.tolist()``, ``.numpy()``) its own body makes, from the project index's line
  scan (:class:`pitstop.lint.project.ModuleInfo` ``host_reads``).

Needs ``module``, ``scope``, ``info``, ``project``, ``path`` and ``current_class`` from the
class it is mixed into.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from pitstop.lint.nodes import kwarg, last_name, number_value, string_value

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

    def sync_helper(self, call: cst.Call) -> tuple[str, int, str] | None:
        """(function name, line in its file, host read) when ``call`` calls a function of this file
        (a plain name, or ``self.<method>`` of the enclosing class) or one imported from a linted
        sibling, whose own body reads a device value on the host; else None."""
        func = call.func
        if isinstance(func, cst.Name):
            name = func.value
            found = self.info.host_reads.get(name)
            if found is not None and self.qualname(func) is None:
                return (name, *found)
            imported = self.info.imports.get(name)
            if imported is not None and self.project is not None:
                target = self.project.module_of(self.path, imported[0])
                hit = target.host_reads.get(imported[1]) if target is not None else None
                return (name, *hit) if hit is not None else None
            return None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self" \
                and self.current_class() is not None:
            name = last_name(func)
            found = self.info.host_reads.get(name)
            return (name, *found) if found is not None else None
        return None
