"""One traversal of one file, feeding every selected rule: :class:`FileContext`.

The walk is a plain recursive descent over the libcst tree's fields (about 14x cheaper than
libcst's own visitor machinery, which rebuilds every node on the way up); whitespace and
punctuation nodes are skipped. While walking it keeps the frames rules ask about (scopes
with their imports and bindings, loops, ``if`` blocks, ``with`` blocks) and collects the
file-wide facts (training loops, "CUDA implied", nn.Module classes). Rules report through
:meth:`FileContext.report`; a report may carry a ``when`` predicate that is judged after the
whole file was seen (a loop is a training loop only once its ``.backward()`` was found).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

import libcst as cst

from pitstop.lint.frames import OPTIMIZER_NAME, Cond, Loop, Scope, StepSite, WithBlock
from pitstop.lint.nodes import dotted, last_name, string_value

__all__ = ["FileContext", "FixSpec", "Pending", "DATALOADER", "DDP", "MODULE_BASES", "AUTOCASTS", "children", "find",
           "loss_names"]

DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
                       "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast_mode.autocast"})
#: torch.* functions that return something other than a tensor (for "a tensor expression").
_NOT_TENSOR = frozenset({"device", "dtype", "no_grad", "enable_grad", "inference_mode", "autocast", "compile",
                         "load", "save", "manual_seed", "seed", "set_grad_enabled", "get_default_dtype",
                         "is_tensor", "numel", "jit", "set_printoptions", "finfo", "iinfo", "Generator",
                         "Size", "typename", "use_deterministic_algorithms", "set_num_threads", "get_num_threads"})
_EVAL_NAME = re.compile(r"eval|valid|test|predict|infer", re.I)
_MODEL_NAME = re.compile(r"model|^net$|^network$|^(student|teacher)$", re.I)
_ITER_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip", "islice", "cycle", "track"})

_SKIP = frozenset({"lpar", "rpar", "comma", "leading_lines", "lines_after_decorators", "header",
                   "footer", "semicolon", "newline", "trailing_whitespace", "equal", "dot", "colon",
                   "operator", "attr", "keyword", "asynchronous", "star", "default_indent",
                   "default_newline", "encoding", "has_trailing_newline", "value_string"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(t: type) -> tuple[str, ...]:
    f = _FIELDS.get(t)
    if f is None:
        f = _FIELDS[t] = tuple(x.name for x in dataclasses.fields(t)
                               if x.name not in _SKIP and not x.name.startswith("whitespace"))
    return f


def children(node: cst.CSTNode):
    """The semantic child nodes of ``node`` in field order (no whitespace/punctuation)."""
    for name in _fields(type(node)):
        v = getattr(node, name)
        if isinstance(v, cst.CSTNode):
            yield v
        elif isinstance(v, (tuple, list)):
            for c in v:
                if isinstance(c, cst.CSTNode):
                    yield c


def find(node: cst.CSTNode, pred: Callable[[cst.CSTNode], bool], *, into_functions: bool = False):
    """First node in ``node``'s subtree (itself included) satisfying ``pred``, or None."""
    stack = [node]
    while stack:
        n = stack.pop()
        if pred(n):
            return n
        if not into_functions and n is not node and isinstance(n, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        stack.extend(reversed(list(children(n))))
    return None


@dataclass(frozen=True)
class FixSpec:
    applicability: str
    message: str
    edits: tuple  # ((original node, replacement: str | CSTNode), ...)


@dataclass
class Pending:
    code: str
    node: Any
    message: str
    fix: FixSpec | None
    when: Callable[[], bool] | None


class FileContext:
    """What rules can ask about the file being linted; see the module docstring."""

    def __init__(self, module: cst.Module, rule_classes: list[type]):
        self.module = module
        self.rules = [cls(self) for cls in rule_classes]
        self.pending: list[Pending] = []
        self.stack: list[Any] = []
        self.ancestors: list[cst.CSTNode] = []
        self.scope: Scope = Scope("module", module, None)
        self.cuda_implied = False
        self.module_classes: set[str] = set()
        self._hooks: dict[str, tuple[list, list]] = {}
        for rule in self.rules:
            for name, (visits, leaves) in type(rule).hooks.items():
                v, lv = self._hooks.setdefault(name, ([], []))
                v.extend(getattr(rule, m) for m in visits)
                lv.extend(getattr(rule, m) for m in leaves)
        self._plans: dict[type, tuple] = {}
        self._special = {
            cst.Module: self._walk_module, cst.FunctionDef: self._walk_function,
            cst.Lambda: self._walk_lambda, cst.ClassDef: self._walk_class, cst.For: self._walk_for,
            cst.While: self._walk_while, cst.If: self._walk_if, cst.With: self._walk_with,
        }
        self._pre = {cst.Call: self._pre_call, cst.Import: self._pre_import, cst.ImportFrom: self._pre_import_from,
                     cst.SimpleString: self._pre_string, cst.FormattedString: self._pre_string,
                     cst.Attribute: self._pre_attribute}
        self._post = {cst.Assign: self._post_assign, cst.AnnAssign: self._post_assign}

    # -- running -----------------------------------------------------------------------
    def run(self) -> list[Pending]:
        self._walk(self.module)
        for rule in self.rules:
            rule.finish()
        return [p for p in self.pending if p.when is None or p.when()]

    def _plan(self, t: type) -> tuple:
        hooks = self._hooks.get(t.__name__, ((), ()))
        plan = self._plans[t] = (hooks[0], self._pre.get(t), self._special.get(t), self._post.get(t), hooks[1])
        return plan

    def _walk(self, node: cst.CSTNode) -> None:
        t = type(node)
        plan = self._plans.get(t) or self._plan(t)
        visits, pre, special, post, leaves = plan
        self.ancestors.append(node)
        if pre is not None:
            pre(node)
        for h in visits:
            h(node)
        if special is not None:
            special(node)
        else:
            walk = self._walk
            for name in _FIELDS.get(t) or _fields(t):
                v = getattr(node, name)
                if isinstance(v, cst.CSTNode):
                    walk(v)
                elif type(v) is tuple or type(v) is list:
                    for c in v:
                        if isinstance(c, cst.CSTNode):
                            walk(c)
        if post is not None:
            post(node)
        for h in leaves:
            h(node)
        self.ancestors.pop()

    def _walk_all(self, nodes) -> None:
        for n in nodes:
            if isinstance(n, cst.CSTNode):
                self._walk(n)

    def _in_frame(self, frame: Any, body: cst.CSTNode) -> None:
        self.stack.append(frame)
        try:
            self._walk(body)
        finally:
            self.stack.pop()

    def _in_scope(self, scope: Scope, body: cst.CSTNode) -> None:
        outer, self.scope = self.scope, scope
        try:
            self._in_frame(scope, body)
        finally:
            self.scope = outer

    # -- compound statements -------------------------------------------------------
    def _walk_module(self, node: cst.Module) -> None:
        self.stack.append(self.scope)
        self._walk_all(node.body)
        self.stack.pop()

    def _walk_function(self, node: cst.FunctionDef) -> None:
        self._walk_all(d for d in node.decorators)
        self._walk(node.params)
        if node.returns is not None:
            self._walk(node.returns)
        self.scope.bind(node.name.value, node)
        scope = Scope("function", node, self.scope)
        for p in _params(node.params):
            scope.bind(p)
        self._in_scope(scope, node.body)

    def _walk_lambda(self, node: cst.Lambda) -> None:
        self._walk(node.params)
        scope = Scope("lambda", node, self.scope)
        for p in _params(node.params):
            scope.bind(p)
        self._in_scope(scope, node.body)

    def _walk_class(self, node: cst.ClassDef) -> None:
        self._walk_all(node.decorators)
        self._walk_all(node.bases)
        self._walk_all(node.keywords)
        for base in node.bases:
            q = self.qualname(base.value)
            if q in MODULE_BASES or (isinstance(base.value, cst.Name) and base.value.value in self.module_classes):
                self.module_classes.add(node.name.value)
        self.scope.bind(node.name.value, node)
        self._in_scope(Scope("class", node, self.scope), node.body)

    def _walk_for(self, node: cst.For) -> None:
        self._walk(node.iter)
        self._walk(node.target)
        targets = frozenset(_names(node.target))
        for name in targets:
            self.scope.bind(name)
        loop = Loop(node, self.scope, targets, self._iterates_loader(node.iter))
        self._in_frame(loop, node.body)
        if node.orelse is not None:
            self._walk(node.orelse)

    def _walk_while(self, node: cst.While) -> None:
        self._walk(node.test)
        self._in_frame(Loop(node, self.scope), node.body)
        if node.orelse is not None:
            self._walk(node.orelse)

    def _walk_if(self, node: cst.If) -> None:
        self._walk(node.test)
        guard = find(node.test, lambda n: isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo))
        self._in_frame(Cond(node, guard is not None), node.body)
        if node.orelse is not None:
            self._in_frame(Cond(node, False, orelse=True), node.orelse)

    def _walk_with(self, node: cst.With) -> None:
        self._walk_all(node.items)
        for item in node.items:
            if item.asname is not None:
                for name in _names(item.asname.name):
                    self.scope.bind(name)
        calls = tuple(i.item for i in node.items if isinstance(i.item, cst.Call))
        self._in_frame(WithBlock(node, calls), node.body)

    # -- facts collected on the way --------------------------------------------------
    def _pre_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _dotted_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.scope.bind_import(alias.asname.name.value, full)
            else:
                head = full.split(".", 1)[0]
                self.scope.bind_import(head, head)

    def _pre_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        base = _dotted_name(node.module)
        for alias in node.names:
            name = _dotted_name(alias.name)
            local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else name
            self.scope.bind_import(local, f"{base}.{name}")

    def _pre_string(self, node: cst.CSTNode) -> None:
        if not self.cuda_implied:
            s = string_value(node)
            if s is not None and s.startswith("cuda"):
                self.cuda_implied = True

    def _pre_attribute(self, node: cst.Attribute) -> None:
        if not self.cuda_implied and node.attr.value == "cuda" and self.qualname(node.value) == "torch":
            self.cuda_implied = True

    def _pre_call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        name = func.attr.value
        if name == "backward":
            loop = self.loop()
            if loop is not None:
                loop.backward_calls.append((node, func.value))
        elif name == "step":
            if self.is_optimizer(func.value) or (
                    node.args and "scaler" in (last_name(func.value) or "").lower()
                    and self.is_optimizer(node.args[0].value)):
                loop = self.loop()
                if loop is not None:
                    loop.steps.append((node, self.site().conditional(loop)))
        elif name == "cuda":
            self.cuda_implied = True

    def _post_assign(self, node) -> None:
        value = node.value
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            key = dotted(target)
            if key is not None:
                self.scope.bind(key, value if len(targets) == 1 else None)
            else:
                for name in _names(target):
                    self.scope.bind(name)

    # -- what rules ask ----------------------------------------------------------------
    @property
    def parent(self) -> cst.CSTNode | None:
        """Parent of the node being visited."""
        return self.ancestors[-2] if len(self.ancestors) > 1 else None

    def qualname(self, expr: cst.BaseExpression | None) -> str | None:
        """``torch.optim.AdamW`` for ``T.optim.AdamW`` after ``import torch as T``; None when
        the root name is local, a builtin or unknown. Matching is never by bare suffix."""
        if isinstance(expr, cst.Name):
            return self.scope.resolve(expr.value)
        if isinstance(expr, cst.Attribute):
            head = self.qualname(expr.value)
            return None if head is None else f"{head}.{expr.attr.value}"
        return None

    def call_name(self, node: cst.CSTNode) -> str | None:
        """Qualified name of the function a Call calls (None for anything else)."""
        return self.qualname(node.func) if isinstance(node, cst.Call) else None

    def function_frames(self) -> tuple:
        """Frames from the innermost function/lambda scope (exclusive) to here."""
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            f = stack[i]
            if isinstance(f, Scope) and f.kind != "class":
                return tuple(stack[i + 1:])
        return tuple(stack)

    def site(self) -> StepSite:
        return StepSite(self.function_frames())

    def loop(self) -> Loop | None:
        """The innermost loop of the current function around the node."""
        for f in reversed(self.stack):
            if isinstance(f, Loop):
                return f
            if isinstance(f, Scope) and f.kind != "module":
                return None
        return None

    def current_function(self) -> cst.FunctionDef | None:
        for f in reversed(self.stack):
            if isinstance(f, Scope) and f.kind == "function":
                return f.node
        return None

    def current_class(self) -> cst.ClassDef | None:
        for f in reversed(self.stack):
            if isinstance(f, Scope) and f.kind == "class":
                return f.node
        return None

    def value_of(self, expr: cst.BaseExpression | str, same_scope: bool = False) -> Any:
        key = expr if isinstance(expr, str) else dotted(expr)
        return None if key is None else self.scope.lookup(key, same_scope)

    def is_optimizer(self, expr: cst.BaseExpression) -> bool:
        """Bound to a ``torch.optim.*`` constructor, or named like ``opt``/``optimizer``."""
        name = last_name(expr)
        if name is not None and OPTIMIZER_NAME.search(name.lower()):
            return True
        value = self.value_of(expr)
        q = self.call_name(value) if value is not None else None
        return bool(q and q.startswith("torch.optim.") and ".lr_scheduler." not in q)

    def optimizer_class(self, node: cst.CSTNode | None) -> str | None:
        """``torch.optim.AdamW`` when ``node`` constructs a torch.optim optimizer, else None."""
        q = self.call_name(node) if node is not None else None
        if q and q.startswith("torch.optim.") and q.rsplit(".", 1)[1][:1].isupper() \
                and ".lr_scheduler." not in q and ".swa_utils." not in q:
            return q
        return None

    def is_autocast(self, call: cst.CSTNode) -> bool:
        """Any autocast context: torch.autocast, torch.amp/cuda.amp/cpu.amp.autocast, or a bare
        imported ``autocast``."""
        q = self.call_name(call)
        return q in AUTOCASTS or (q is not None and isinstance(call.func, cst.Name) and call.func.value == "autocast")

    def grad_mode(self, expr: cst.CSTNode) -> str | None:
        """``"no_grad"`` / ``"inference_mode"`` when ``expr`` (a with item or decorator,
        called or not) disables autograd; ``set_grad_enabled(False)`` counts as no_grad."""
        func = expr.func if isinstance(expr, cst.Call) else expr
        q = self.qualname(func)
        if q in ("torch.no_grad", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"):
            return "no_grad"
        if q in ("torch.inference_mode", "torch.autograd.grad_mode.inference_mode"):
            if isinstance(expr, cst.Call) and expr.args and _is_false(expr.args[0].value):
                return None
            return "inference_mode"
        if q == "torch.set_grad_enabled" and isinstance(expr, cst.Call) and expr.args and _is_false(expr.args[0].value):
            return "no_grad"
        return None

    def is_tensor_expr(self, expr: cst.CSTNode | None) -> bool:
        """A call of a ``torch.<function>`` that returns a tensor (``torch.zeros(...)``), possibly
        followed by method calls (``torch.zeros(3).cuda()``)."""
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            q = self.call_name(expr)
            if q is not None:
                break
            expr = expr.func.value
        q = self.call_name(expr) if isinstance(expr, cst.Call) else None
        if not q or not q.startswith("torch."):
            return False
        rest = q[6:]
        return "." not in rest and rest[:1].islower() and rest not in _NOT_TENSOR and not rest.startswith(("set_", "is_", "get_", "use_"))

    loss_names = staticmethod(lambda expr: loss_names(expr))

    def loader_targets(self) -> frozenset[str]:
        """Names bound by the enclosing ``for ... in <loader>`` loops of the current function."""
        out: set[str] = set()
        for f in self.function_frames():
            if isinstance(f, Loop) and f.over_loader:
                out |= f.targets
        return frozenset(out)

    def with_calls(self) -> list[cst.Call]:
        """Calls of the items of the enclosing ``with`` blocks in the current function."""
        return [c for f in self.function_frames() if isinstance(f, WithBlock) for c in f.calls]

    def is_ddp(self, node: cst.CSTNode | None) -> bool:
        """A ``DistributedDataParallel(...)`` construction."""
        return self.call_name(node) in DDP if node is not None else False

    def is_dataloader(self, node: cst.CSTNode | None) -> bool:
        return self.call_name(node) in DATALOADER if node is not None else False

    def is_module_expr(self, expr: cst.BaseExpression | None) -> bool:
        """An ``nn.*`` layer constructor or a class of this file subclassing nn.Module,
        optionally chained with ``.to(...)``, ``.cuda()`` or ``.cpu()``."""
        while (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
               and expr.func.attr.value in ("to", "cuda", "cpu")):
            expr = expr.func.value
        if not isinstance(expr, cst.Call):
            return False
        q = self.call_name(expr)
        if q and q.startswith("torch.nn.") and q.rsplit(".", 1)[1][:1].isupper():
            return True
        return isinstance(expr.func, cst.Name) and expr.func.value in self.module_classes

    def is_model_call(self, call: cst.Call) -> bool:
        """A call of something that looks like a model: named ``model``/``net``, or bound to
        an nn.Module instance in this file."""
        name = last_name(call.func)
        if name is None:
            return False
        if _MODEL_NAME.search(name):
            return True
        return self.is_module_expr(self.value_of(call.func))

    @staticmethod
    def is_eval_function(node: cst.CSTNode | None) -> bool:
        return isinstance(node, cst.FunctionDef) and _EVAL_NAME.search(node.name.value) is not None

    def _iterates_loader(self, it: cst.BaseExpression) -> bool:
        todo = [it]
        while todo:
            e = todo.pop()
            if isinstance(e, cst.Call):
                if self.is_dataloader(e):
                    return True
                if last_name(e.func) in _ITER_WRAPPERS:
                    todo.extend(a.value for a in e.args if a.keyword is None)
                continue
            name = last_name(e)
            if name is not None and ("loader" in name.lower() or self.is_dataloader(self.value_of(e))):
                return True
        return False

    # -- reporting -----------------------------------------------------------------------
    def report(self, code: str, node: Any, message: str, fix: FixSpec | None, when) -> None:
        self.pending.append(Pending(code, node, message, fix, when))

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    @staticmethod
    def fix(applicability: str, message: str, *edits: tuple) -> FixSpec:
        """A fix made of ``(node, replacement)`` edits; a replacement is code or a node."""
        return FixSpec(applicability, message, tuple(edits))


def _is_false(node) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def loss_names(expr: cst.CSTNode | None) -> set[str]:
    """Names a ``.backward()`` receiver is made of: ``loss`` in ``loss``, ``scaler.scale(loss)``,
    ``(loss / k)``, ``loss.mean()``."""
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.Attribute):
        key = dotted(expr)
        return {key} if key else set()
    if isinstance(expr, cst.BinaryOperation):
        return loss_names(expr.left) | loss_names(expr.right)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        if expr.func.attr.value == "scale" and expr.args:
            return loss_names(expr.args[0].value)
        return loss_names(expr.func.value)
    return set()


def _params(params: cst.Parameters) -> list[str]:
    out = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    for p in (params.star_arg, params.star_kwarg):
        if isinstance(p, cst.Param):
            out.append(p.name.value)
    return out


def _names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in _names(el.value)]
    if isinstance(target, cst.StarredElement):
        return _names(target.value)
    return []


def _dotted_name(node: cst.CSTNode) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr.value}"
    return ""
