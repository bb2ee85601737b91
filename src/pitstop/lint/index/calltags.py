"""Calls tagged by what they can reach, for the line scan of :mod:`pitstop.lint.index.callgraph` (issue 42: calls
are resolved by scope, never by name alone).

Each call of a file's text gets a tag:

- ``stem:name`` for a plain call or one through an imported module: a function of the module whose file is
  ``stem.py`` (``train.py``'s own ``train()`` is ``train:train``; ``clip_gradients`` imported ``from utils
  import clip_gradients`` or called as ``utils.clip_gradients(...)`` is ``utils:clip_gradients``);
- ``@name`` for ``self.name(...)`` / ``cls.name(...)``: a method of the caller's class (or a base);
- ``.name`` for ``obj.name(...)``: a method of some object (``callbacks.run(...)``, ``model.train()``),
  never a module function of that name;
- nothing for a call through a library or the standard library (``subprocess.run(...)``, ``torch.save``).

A definition's key is ``stem:name`` for a function and ``.name`` for a method; :func:`resolve` maps a tag to
the key it reaches, or to nothing when that cannot be told: a method called on an object is followed only
when one class of the project defines it, and (for frequencies) never for a method name of torch's modules,
tensors and optimizers or Python's containers (:data:`COMMON_METHODS`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

__all__ = ["Imports", "COMMON_METHODS", "imports_of", "call_tags", "resolve", "module_stem", "function_key"]

#: methods of torch modules, optimizers, tensors and Python's containers, files and loggers: a call
#: ``model.train()``, ``meter.update(x)`` or ``callbacks.run(...)`` names one of these far more often than
#: the project's own method of that name, so it is never resolved to one
COMMON_METHODS = frozenset({
    "train", "eval", "forward", "step", "zero_grad", "backward", "to", "cuda", "cpu", "item", "numpy", "tolist",
    "detach", "clone", "float", "half", "bfloat16", "long", "int", "bool", "size", "view", "reshape", "mean", "sum",
    "state_dict", "load_state_dict", "parameters", "named_parameters", "modules", "named_modules", "children",
    "apply", "register_buffer", "register_forward_hook", "requires_grad_", "add_param_group", "append", "extend",
    "insert", "pop", "remove", "update", "get", "items", "keys", "values", "setdefault", "copy", "add", "discard",
    "join", "split", "strip", "replace", "format", "encode", "decode", "startswith", "endswith", "info", "debug",
    "warning", "warn", "error", "exception", "all_reduce",
    "broadcast", "barrier", "synchronize", "elapsed_time"})
#: packages that are no project's own: a call through one (``subprocess.run``, ``wandb.log``) reaches no linted
#: function (Python's standard library is added from ``sys.stdlib_module_names``)
_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "scipy", "pandas", "sklearn", "wandb", "tensorboard",
    "tensorboardX", "transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "timm",
    "PIL", "cv2", "tqdm", "yaml", "omegaconf", "hydra", "datasets", "deepspeed", "apex", "einops", "matplotlib",
    "requests", "psutil", "comet_ml", "clearml", "mlflow", "boto3", "safetensors", "tokenizers", "sentencepiece",
    "tiktoken", "triton", "fairscale", "jax", "tensorflow", "keras", "huggingface_hub", "peft", "trl", "diffusers",
    "xformers", "flash_attn", "torchmetrics", "albumentations", "h5py", "lmdb", "seaborn", "plotly", "fsspec",
    "pycocotools", "thop", "ultralytics", "open_clip", "webdataset", "fvcore", "iopath", "submitit"}
    | set(getattr(sys, "stdlib_module_names", ())))
_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)|import[ \t]+([^\n#]+))",
                          re.M)
_CALLED = re.compile(r"(?<!def )(?<!class )(?<![\w.])((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)[ \t]*\(")
_KEYWORDS = frozenset({"if", "for", "while", "return", "print", "and", "or", "not", "in", "with", "elif", "assert",
                       "len", "range", "isinstance", "super", "int", "float", "str", "dict", "list", "tuple", "set",
                       "min", "max", "zip", "enumerate", "getattr", "setattr", "hasattr", "type", "sum", "sorted"})


def module_stem(path: str) -> str:
    """``train`` for ``train.py``; the package's folder name for an ``__init__.py``."""
    base = os.path.splitext(os.path.basename(path))[0]
    return os.path.basename(os.path.dirname(os.path.abspath(path))) if base == "__init__" else base


def function_key(stem: str, name: str) -> str:
    return f"{stem}:{name}"


@dataclass(frozen=True)
class Imports:
    """What a file's imports bind, for tagging its calls."""

    stem: str = ""  # the file's own module stem
    functions: dict = field(default_factory=dict)  # name bound by ``from mod import f [as name]`` -> "stem:f"
    modules: dict = field(default_factory=dict)  # name bound to a project module (``import val as v``) -> its stem
    libraries: frozenset = frozenset()  # names bound to a library or the standard library (``np``, ``subprocess``)


def _last(module: str) -> str:
    return module.strip(".").rsplit(".", 1)[-1]


def imports_of(text: str, stem: str = "") -> Imports:
    functions: dict = {}
    modules: dict = {}
    libraries: set = set()
    for m in _IMPORT_LINE.finditer(text):
        if m[3] is not None:  # import a.b [as c]
            for part in m[3].split(","):
                words = part.split()
                if not words:
                    continue
                alias = words[-1] if len(words) >= 3 and words[-2] == "as" else words[0].split(".")[0]
                target = words[0] if len(words) >= 3 and words[-2] == "as" else words[0].split(".")[0]
                (libraries.add(alias) if words[0].split(".")[0] in _LIBRARIES else modules.__setitem__(alias, _last(target)))
            continue
        module = m[1]
        for part in m[2].strip("() \t\r\n").split(","):
            words = part.split("#", 1)[0].split()
            if not words or words[0] == "*":
                continue
            name, alias = words[0], words[-1] if len(words) >= 3 and words[-2] == "as" else words[0]
            if module.lstrip(".").split(".")[0] in _LIBRARIES:
                libraries.add(alias)
            elif module.strip(".") == "" or name[:1].islower():
                # ``from . import utils`` / ``from pkg import misc``: a module or a function; both are recorded
                modules[alias] = name
                functions[alias] = function_key(_last(module) or stem, name)
            else:
                functions[alias] = function_key(_last(module) or stem, name)
    return Imports(stem, functions, modules, frozenset(libraries))


def call_tags(code: str, imports: Imports) -> set[str]:
    """The tags of the calls in ``code`` (see the module docstring)."""
    out = set()
    for m in _CALLED.finditer(code):
        name, prefix = m[2], m[1]
        if name in _KEYWORDS:
            continue
        first = prefix.split(".", 1)[0]
        if first in imports.libraries:
            continue  # ``subprocess.run(...)``, ``torch.save(...)``: no linted function
        if not prefix:
            out.add(imports.functions.get(name) or function_key(imports.stem, name))
        elif first in imports.modules and prefix.count(".") == 1:
            out.add(function_key(imports.modules[first], name))
        elif first in ("self", "cls") and prefix.count(".") == 1:
            out.add("@" + name)
        else:
            out.add("." + name)
    return out


def resolve(tag: str, defined: dict, common: bool = True) -> str | None:
    """The definition key a call tag reaches among ``defined`` (key -> [CallInfo]); None when it reaches none,
    or none that can be told (a method called on an object that several classes define, or, with ``common``,
    one of :data:`COMMON_METHODS`: unknown, never guessed). Chains to a sync (``callgraph.sync_chain``) pass
    ``common=False``: they need evidence in the helper's own code besides."""
    if tag[:1] == "@":
        key = "." + tag[1:]
        return key if key in defined else None
    if tag[:1] == ".":
        infos = defined.get(tag, ())
        if common and tag[1:] in COMMON_METHODS or len(infos) != 1 or tag in infos[0].ambiguous:
            return None
        return tag
    return tag if tag in defined else None
