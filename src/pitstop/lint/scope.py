"""Which DataLoader is a *training* loader: the scope of the rules that claim "training".

A ``DataLoader(...)`` is judged NOT a training loader (the rule stays silent) when it is:

- in a unit test (``test_*.py``, a ``test_*`` function; see ``Matchers.in_unit_test``);
- a one-off: ``next(iter(DataLoader(...)))`` reads one batch;
- named for evaluation: the name it is bound to, the keyword or dict key it is passed as, or
  the function that builds it says validation/evaluation/test/prediction/inference/sampling/
  prompts/calibration (``val_loader = ...``, ``def val_dataloader(self)``), and not training;
- an ordered pass: literal ``shuffle=False`` with no sampler, and not named for training;
- (with ``in_memory=True``, PIT101) over an in-memory dataset (the tip's own docs: workers cost
  more than they save there): a ``TensorDataset``, a list/tuple literal, a tensor expression, or
  a Dataset class (this file's or imported from a linted file) whose ``__getitem__`` only
  indexes/slices (no call but ``len``/``int``/``min``...); or over an ``IterableDataset`` whose
  file never calls ``get_worker_info()`` (each worker would replay the whole stream, or a forked
  copy of a live replay buffer); or over synthetic rows, a Hugging Face dataset built in memory
  (``Dataset.from_dict``/``from_list``) from numbers drawn at random (``np.random.randint(...)``).
  When the dataset is a parameter the lint cannot follow, the Dataset classes the file builds
  decide: all of those kinds, no finding.

:func:`loader_scope` returns None (no finding) or a predicate for ``LintRule.report(when=...)``.
"""

from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from pitstop.lint.nodes import arg, dotted, is_false, last_name, string_value
from pitstop.lint.walk import find

__all__ = ["loader_scope", "EVAL_NAME", "eval_only", "items_on_device"]

#: names of evaluation-only objects (loaders, datasets, functions building them); a word start, so
#: ``latest_loader``/``interval``/``retrieval`` are not evaluation and ``trainval`` is training
EVAL_NAME = re.compile(r"(?<![a-z])(?:val|eval|test|predict|infer|sampl(?:e|ing)(?!r)|prompt|calib|holdout)", re.I)
_TRAIN_NAME = re.compile(r"train|fit", re.I)
#: dataset kinds that workers do not help: in memory, unsharded streams, items already on the accelerator
#: (a forked worker cannot use CUDA)
_NO_WORKERS = frozenset({"in_memory", "unsharded_iterable", "on_device"})
_IN_MEMORY = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset",
                        "torch.utils.data.StackDataset"})
#: constructors of an in-memory Hugging Face dataset, and the calls that draw random numbers
_FROM_MEMORY = frozenset({"from_dict", "from_list"})
_RANDOM_DRAW = frozenset({"randint", "randn", "rand", "random", "normal", "uniform", "integers", "standard_normal"})


def _names_around(ctx) -> tuple[list[str], str | None]:
    """(names the loader is bound to or passed as, innermost first; the enclosing function's name)."""
    out: list[str] = []
    for node in reversed(ctx.ancestors[:-1]):
        if isinstance(node, cst.Arg) and node.keyword is not None:
            out.append(node.keyword.value)
        elif isinstance(node, cst.DictElement):
            s = string_value(node.key)
            if s:
                out.append(s)
        elif isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            out.extend(n for n in (last_name(t) for t in targets) if n)
            break
        elif isinstance(node, (cst.SimpleStatementLine, cst.FunctionDef)):
            break
    fn = ctx.current_function()
    return out, (fn.name.value if fn is not None else None)


def eval_only(name: str | None) -> bool:
    """A name about evaluation (``val_loader``, ``test_dataloader``) and not about training."""
    return bool(name) and EVAL_NAME.search(name) is not None and _TRAIN_NAME.search(name) is None


def _ordered_sampler(ctx, value: cst.BaseExpression) -> bool:
    """``SequentialSampler(...)`` or a sampler built with ``shuffle=False`` (``DistributedSampler(ds,
    shuffle=False)``): an ordered pass over the data, not a training loader."""
    if isinstance(value, cst.Name):
        value = ctx.value_of(value) or value
    if not isinstance(value, cst.Call):
        return False
    if (last_name(value.func) or "") == "SequentialSampler":
        return True
    shuffle = arg(value, "shuffle")
    return shuffle is not None and is_false(shuffle.value)


def _one_off(ctx) -> bool:
    """``next(iter(<the loader>))``."""
    anc = ctx.ancestors
    calls = [n for n in reversed(anc[:-1]) if isinstance(n, cst.Call)][:2]
    return len(calls) == 2 and last_name(calls[0].func) == "iter" and last_name(calls[1].func) == "next"


def loader_scope(ctx, call: cst.Call, in_memory: bool = True) -> Callable[[], bool] | None:
    """None when ``call`` (a DataLoader construction being visited) is certainly not a training
    loader; else a predicate, judged after the file, that is False for in-memory datasets
    (``in_memory=False``: in-memory datasets count as training loaders too)."""
    if ctx.in_unit_test() or _one_off(ctx):
        return None
    bound, function = _names_around(ctx)
    first = bound[0] if bound else None
    training = first is not None and _TRAIN_NAME.search(first) is not None
    if eval_only(first) or not training and eval_only(function):
        return None
    shuffle = arg(call, "shuffle", 2)
    sampler = arg(call, "sampler", 3)
    if not training and (shuffle is not None and is_false(shuffle.value) and sampler is None
                         or sampler is not None and _ordered_sampler(ctx, sampler.value)):
        return None
    fn = ctx.current_function()
    if not training and fn is not None and any(ctx.grad_mode(d.decorator) for d in fn.decorators):
        return None  # built by a function that runs without autograd (feature extraction, evaluation)
    data = arg(call, "dataset", 0)
    if data is None or not in_memory:
        return lambda: True
    value = data.value
    if _pretokenized(ctx, call, value):
        return None
    if isinstance(value, cst.Name):
        if eval_only(value.value):
            return None
        bound = ctx.value_of(value)
        value = bound if bound is not None else value
    if isinstance(value, (cst.List, cst.Tuple, cst.ListComp)) or ctx.call_name(value) in _IN_MEMORY \
            or ctx.is_tensor_expr(value) or _synthetic(value):
        return None
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        kind = ctx.dataset_kind(value.func.value)
        if kind is not None:
            return None if kind in _NO_WORKERS else (lambda: True)
    # a dataset the lint cannot follow (a parameter, an attribute): judge by the dataset classes
    # this file builds; all in memory (or unsharded streams) means no worker would help
    kinds = {ctx.dataset_kind(name) for name in ctx.info.called_classes} - {None}
    if kinds and kinds <= _NO_WORKERS:
        return None
    return lambda: True


def _synthetic(value) -> bool:
    """``Dataset.from_dict({"input_ids": np.random.randint(...)})``: rows drawn at random, held in memory."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in _FROM_MEMORY):
        return False
    return any(find(a.value, lambda n: isinstance(n, cst.Call) and last_name(n.func) in _RANDOM_DRAW) is not None
               for a in value.args)


def items_on_device(ctx, call: cst.Call) -> bool:
    """The loader's batches are already on the accelerator: its dataset is a Dataset class (here or
    in a linted sibling) that puts items on the device, or its ``collate_fn`` is a function of this
    file that moves them there. Pinning such batches fails; nothing is left to copy."""
    collate = arg(call, "collate_fn", 6)
    if collate is not None and isinstance(collate.value, cst.Name) and collate.value.value in ctx.info.device_functions:
        return True
    data = arg(call, "dataset", 0)
    value = data.value if data is not None else None
    if isinstance(value, cst.Name):
        bound = ctx.value_of(value)
        value = bound if bound is not None else value
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
        return ctx.dataset_kind(value.func.value) == "on_device"
    kinds = {ctx.dataset_kind(name) for name in ctx.info.called_classes} - {None}
    return bool(kinds) and kinds == {"on_device"}


#: methods of a Hugging Face ``datasets.Dataset`` that return another one, rows kept as stored
_DATASET_CHAIN = frozenset({"rename_column", "rename_columns", "remove_columns", "with_format", "set_format",
                            "shuffle", "select", "filter", "train_test_split", "flatten", "cast_column"})
#: collators that only stack or pad pre-tokenized rows
_PAD_COLLATORS = frozenset({"default_data_collator", "DataCollatorWithPadding", "DataCollatorForSeq2Seq"})


def _pretokenized(ctx, call: cst.Call, value) -> bool:
    """A loader over rows a ``.map(...)`` computed up front (a pre-tokenized Hugging Face dataset:
    ``tokenized["train"]``) whose ``collate_fn`` only stacks or pads them: per batch there is no
    work a worker process would take off the training loop."""
    mapped = False
    for _ in range(8):
        if isinstance(value, cst.Subscript):
            value = value.value
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            name = value.func.attr.value
            if name == "map":
                mapped = True
                break
            if name not in _DATASET_CHAIN:
                return False
            value = value.func.value
        elif isinstance(value, cst.Name):
            bound = ctx.value_of(value)
            if bound is None:
                return False
            if _rebinds(bound, value.value):  # ``ds = ds.rename_column(...)``: the earlier binding is gone
                mapped = re.search(rf"^[ \t]*{value.value}[ \t]*=[ \t]*[\w.\[\]\"']+\.map\(", ctx.source or "",
                                   re.M) is not None
                break
            value = bound
        else:
            return False
    if not mapped:
        return False
    collate = arg(call, "collate_fn", 6)
    if collate is None:
        return True
    c = collate.value
    name = last_name(c.func) if isinstance(c, cst.Call) else last_name(c)
    return name in _PAD_COLLATORS or isinstance(c, cst.Name) and c.value in ctx.info.pad_functions


def _rebinds(expr, name: str) -> bool:
    """``expr`` is a method chain on the name ``name`` itself."""
    while isinstance(expr, (cst.Call, cst.Attribute, cst.Subscript)):
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return isinstance(expr, cst.Name) and expr.value == name
