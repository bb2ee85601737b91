"""Shared matching helpers of the lint rules (mixed into :class:`FileContext`): what counts
as a DataLoader, an optimizer, a model call, an autocast or no-grad context, an eval function,
a tensor expression; all matched by qualified name through imports and aliases."""

from __future__ import annotations

import re

import libcst as cst

from pitstop.lint.frames import OPTIMIZER_NAME, WithBlock
from pitstop.lint.nodes import dotted, last_name

__all__ = ["Matchers", "DATALOADER", "DDP", "MODULE_BASES", "AUTOCASTS", "FRAMEWORK_ROOTS", "loss_names",
           "is_test_file"]

DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DDP = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
                       "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast_mode.autocast"})
_NOT_TENSOR = frozenset({"device", "dtype", "no_grad", "enable_grad", "inference_mode", "autocast", "compile",
                         "load", "save", "manual_seed", "seed", "set_grad_enabled", "get_default_dtype",
                         "is_tensor", "numel", "jit", "set_printoptions", "finfo", "iinfo", "Generator",
                         "Size", "typename", "use_deterministic_algorithms", "set_num_threads", "get_num_threads"})
_EVAL_NAME = re.compile(r"eval|valid|test|predict|infer", re.I)
_MODEL_NAME = re.compile(r"model|^net$|^network$|^(student|teacher)$", re.I)
#: names that do something TO a model rather than run it: ``load_model(...)``, ``self._swap_models()``
_NOT_FORWARD = re.compile(
    r"^_*(get|build|create|make|load|save|init|initiali[sz]e|setup|set|prepare|swap|copy|unwrap|wrap|register|"
    r"configure|freeze|unfreeze|update|to|from|export|convert|compile|print|log|check|reset|is|has|apply|average|"
    r"sync|replace|patch|instantiate|find|select|fetch|download|upload|push|store|restore|summari[sz]e|count|"
    r"validate|verify|assert|compare|merge|broadcast|gather|move|cast|clone|deepcopy|materiali[sz]e|shard|"
    r"quantize|fuse|profile|describe|dump|train|eval|test|evaluate|pretrain|finetune|fit|run|parallelize)(_|$)",
    re.I)
#: owners of ``X.backward(loss)``: the loss is the argument (accelerate, Fabric, DeepSpeed engines, apex/DeepSpeed
#: FP16 optimizer wrappers: ``optimizer.backward(loss)``)
_BACKWARD_OWNER = re.compile(r"accelerator|fabric|engine|deepspeed|booster|optim", re.I)
_TEST_FILE = re.compile(r"(^|[\\/])(test_[^\\/]*|[^\\/]*_test|conftest)\.py$")
_TEST_FUNC = re.compile(r"^test(_|$)")
_DUMMY = re.compile(r"dummy|boring|toy|mock|fake|placeholder", re.I)
#: base classes whose methods a framework calls (Lightning, Fabric, HF Trainer, Accelerate)
FRAMEWORK_ROOTS = ("lightning.", "pytorch_lightning.", "lightning_fabric.", "transformers.", "accelerate.", "trl.")
_ITER_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip", "islice", "cycle", "track"})



def is_test_file(filename: str) -> bool:
    """``test_x.py``, ``x_test.py``, ``conftest.py``: a unit-test module (pytest's naming)."""
    return bool(_TEST_FILE.search(filename or ""))


def _unit_test(func, owner) -> bool:
    """A ``test_*`` method of a ``Test*`` class (pytest/unittest collect only those outside test
    modules' top level; a module-level ``def test(model, loader)`` in a script is evaluation)."""
    return bool(_TEST_FUNC.match(func.name.value)) and owner.kind == "class" and owner.node.name.value.startswith("Test")


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


class Matchers:
    """Predicates over nodes; needs ``qualname``, ``call_name``, ``value_of`` and
    ``function_frames`` from the class it is mixed into."""

    def is_optimizer(self, expr: cst.BaseExpression) -> bool:
        """Bound to a ``torch.optim.*`` constructor, or named like ``opt``/``optimizer``."""
        name = last_name(expr)
        if name is not None and OPTIMIZER_NAME.search(name.lower()):
            return True
        value = self.value_of(expr)
        q = self.call_name(value) if value is not None else None
        return bool(q and q.startswith("torch.optim.") and ".lr_scheduler." not in q)

    def optimizer_class(self, node: cst.CSTNode | None) -> str | None:
        """``torch.optim.AdamW`` when ``node`` constructs a torch.optim optimizer, else None; also
        through a name bound to the class (``optimizer_class = torch.optim.AdamW`` ...
        ``optimizer_class(params, ...)``)."""
        q = self.call_name(node) if node is not None else None
        if q is None and isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            bound = self.value_of(node.func)
            q = self.qualname(bound) if isinstance(bound, (cst.Name, cst.Attribute)) else None
        if q and q.startswith("torch.optim.") and q.rsplit(".", 1)[1][:1].isupper() \
                and ".lr_scheduler." not in q and ".swa_utils." not in q:
            return q
        return None

    @staticmethod
    def backward_loss(call: cst.Call) -> cst.BaseExpression | None:
        """The loss a backward call differentiates: ``loss`` in ``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``, ``fabric.backward(loss)``,
        ``self.manual_backward(loss)``; None when ``call`` is no backward call."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        name = func.attr.value
        if name == "manual_backward" or name == "backward" and call.args and call.args[0].keyword is None \
                and _BACKWARD_OWNER.search(last_name(func.value) or ""):
            return call.args[0].value if call.args else None
        return func.value if name == "backward" else None

    @staticmethod
    def framework_backward(call: cst.Call) -> bool:
        """``accelerator.backward(loss)`` (accelerate divides by its accumulation steps itself)."""
        return isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" \
            and "accelerator" in (last_name(call.func.value) or "").lower()

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

    def with_calls(self) -> list[cst.Call]:
        """Calls of the items of the enclosing ``with`` blocks in the current function."""
        return [c for f in self.function_frames() if isinstance(f, WithBlock) for c in f.calls]

    def is_ddp(self, node: cst.CSTNode | None) -> bool:
        """A ``DistributedDataParallel(...)`` construction."""
        return self.call_name(node) in DDP if node is not None else False

    def is_dataloader(self, node: cst.CSTNode | None) -> bool:
        return self.call_name(node) in DATALOADER if node is not None else False

    def is_module_expr(self, expr: cst.BaseExpression | None) -> bool:
        """An ``nn.*`` layer constructor, a class of this file subclassing nn.Module, or one
        imported from a linted file of the project (the project index), optionally chained with
        ``.to(...)``, ``.cuda()`` or ``.cpu()``."""
        while (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
               and expr.func.attr.value in ("to", "cuda", "cpu")):
            expr = expr.func.value
        if not isinstance(expr, cst.Call):
            return False
        q = self.call_name(expr)
        if q and q.startswith("torch.nn.") and q.rsplit(".", 1)[1][:1].isupper():
            return True
        if isinstance(expr.func, cst.Name) and expr.func.value in self.module_classes:
            return True
        # a class imported from a sibling file of the linted project (``from model import Net``)
        return bool(q and "." in q and self.project is not None and self.project.is_module_qualname(self.path, q))

    def is_model_call(self, call: cst.Call) -> bool:
        """A call of something that looks like a model: named ``model``/``net`` (not a verb
        on one: ``load_model(...)``), or bound to an nn.Module instance in this file; never a
        function decorated ``@torch.no_grad()``/``inference_mode()`` here or in the project."""
        name = last_name(call.func)
        if name is None:
            return False
        if _MODEL_NAME.search(name) and not _NOT_FORWARD.match(name) or self.is_module_expr(self.value_of(call.func)):
            return name not in self.no_grad_functions()
        return False

    def in_unit_test(self, node: cst.CSTNode | None = None) -> bool:
        """In a unit-test module (``test_*.py``), or in a ``test_*`` method of a ``Test*`` class
        (pytest/unittest naming; a LightningModule's ``test_step`` is not one). ``node``:
        a FunctionDef being entered (its scope is not on the stack yet)."""
        if self.test_file:
            return True
        for f in self.stack:
            if getattr(f, "kind", None) == "function" and _unit_test(f.node, f.parent):
                return True
        return isinstance(node, cst.FunctionDef) and _unit_test(node, self.scope)

    def in_dummy_model(self) -> bool:
        """Inside a class or function named as a deliberate stand-in (``BoringModel``, ``DummyNet``,
        ``make_toy_model``), or in a unit test."""
        if self.in_unit_test():
            return True
        return any(getattr(f, "kind", None) in ("class", "function") and _DUMMY.search(f.node.name.value)
                   for f in self.stack)

    def framework_class(self) -> str | None:
        """Qualified name of the framework base (``lightning.LightningModule``, ``transformers.Trainer``)
        of the innermost enclosing class, through classes of this file; else None."""
        cls = self.current_class()
        return None if cls is None else self.framework_classes.get(cls.name.value)

    def framework_base(self, node: cst.ClassDef) -> str | None:
        for base in node.bases:
            q = self.qualname(base.value)
            if q and q.startswith(FRAMEWORK_ROOTS):
                return q
            if isinstance(base.value, cst.Name) and base.value.value in self.framework_classes:
                return self.framework_classes[base.value.value]
        return None

    @staticmethod
    def is_eval_function(node: cst.CSTNode | None) -> bool:
        return isinstance(node, cst.FunctionDef) and _EVAL_NAME.search(node.name.value) is not None

    def iterates_loader(self, it: cst.BaseExpression) -> bool:
        """``it`` (a ``for`` loop's iterable) is a DataLoader, a name like ``val_loader``, or one wrapped
        in ``enumerate``/``tqdm``/...."""
        return self._iterates_loader(it)

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
