"""The project index: what the OTHER linted files define and call, for rules that need more than
one file (``set_epoch`` called in another module, a model class imported from a sibling file).

Built once per ``pitstop lint`` run, before the files are linted, by a line scan of every file
(regular expressions, no parse: a few milliseconds per file, cached by path, size and mtime).
It records, per module: its classes with their bases (as written), its functions, the
functions and methods decorated ``@torch.no_grad()``/``@torch.inference_mode()``, the method
names it calls (``.set_epoch(``), and its ``from X import Y`` imports.

A file's *project* is the folder above its outermost package (the first folder up that has
no ``__init__.py``): ``timm/data/loader.py`` belongs with ``train.py`` next to ``timm/``, while
two example folders side by side (``mnist/``, ``imagenet/``) are two projects.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

from pitstop.lint.index.callgraph import CallInfo, called_keys, repeated_names, scan_calls
from pitstop.lint.index.bodyscan import (TO_DEVICE, batch_sum_losses, ddp_helpers, device_functions, loads_pretrained,
                                   on_device, pad_functions)
from pitstop.lint.index.calltags import module_stem
from pitstop.lint.findings import ParseError
from pitstop.lint.ipynb import is_notebook, read_notebook
from pitstop.lint.matchers import is_test_file

__all__ = ["ModuleInfo", "ProjectIndex", "build_index", "index_signature", "index_for", "scan_source", "dataset_kind",
           "clear_caches"]

_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.M)
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_NO_GRAD_DEF = re.compile(
    r"^[ \t]*@[\w.]*(?:no_grad|inference_mode)\b(?!\s*\(\s*(?:mode\s*=\s*)?False)[^\n]*\n"
    r"(?:[ \t]*@[^\n]*\n)*[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_METHOD_CALL = re.compile(r"\.(\w+)[ \t]*\(")
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]+)", re.M)
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|import[ \t]+([A-Za-z_][\w.]*))", re.M)
_GETITEM = re.compile(r"^([ \t]*)def[ \t]+__getitem__[ \t]*\([^)]*\)[^:\n]*:[ \t]*\n", re.M)
_CALLED = re.compile(r"([A-Za-z_][\w.]*)[ \t]*\(")
#: calls a synthetic/in-memory ``__getitem__`` may make and still leave workers nothing to do: indexing
#: helpers, and small random or constant tensors (``torch.randint(...)``)
_CHEAP_CALLS = frozenset({"len", "int", "min", "max", "slice", "range", "float", "divmod", "isinstance", "tuple",
                          "randint", "rand", "randn", "randperm", "randrange", "zeros", "ones", "full", "arange",
                          "tensor", "as_tensor", "long"})
_MODULE_ASSIGN = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
_SHARDS = re.compile(r"\bfully_shard\b|FullyShardedDataParallel\b|\bFSDP\s*\(|deepspeed\.initialize\b|FSDPStrategy\b|"
                     r"DeepSpeedStrategy\b|strategy\s*=\s*[\"'](?:fsdp|deepspeed)|"
                     r"^[ \t]*import[ \t]+deepspeed\b|^[ \t]*from[ \t]+torch\.distributed\.fsdp\b", re.M)
_MODULE_BASE = re.compile(r"^(?:torch\.)?(?:nn\.)?(?:Module|Sequential|ModuleList|ModuleDict)$|(?:^|\.)LightningModule$")


@dataclass(frozen=True)
class ModuleInfo:
    """What one file defines and calls."""

    path: str
    classes: dict = field(default_factory=dict)  # name -> tuple of base expressions (as written)
    functions: frozenset = frozenset()  # every def name (top level and methods)
    no_grad_functions: frozenset = frozenset()  # defs decorated @torch.no_grad()/inference_mode()
    method_calls: frozenset = frozenset()  # names called as ``.name(``
    imports: dict = field(default_factory=dict)  # local name -> (module as written, name)
    #: Dataset classes whose ``__getitem__`` only indexes/slices what is in memory (no call but len/int/...)
    in_memory: frozenset = frozenset()
    #: IterableDataset classes in a file that never calls ``get_worker_info()``: every worker would
    #: replay the whole stream (or a forked copy of a live buffer/environment)
    unsharded_iterable: frozenset = frozenset()
    called_classes: frozenset = frozenset()  # capitalised names called: ``MyDataset(...)``
    datasets: frozenset = frozenset()  # classes with a ``__getitem__``/``__iter__`` or a ``*Dataset`` base
    imported_modules: frozenset = frozenset()  # absolute module names imported: ``timm.data``
    module_once: frozenset = frozenset()  # names assigned exactly once at module level (``VOCAB = 50257``)
    #: Dataset classes that put their items on the accelerator (``.cuda()``, ``.to(device)``, ``device=device``
    #: in the class body, e.g. latents encoded on the GPU up front): pinning them fails, workers cannot use CUDA
    on_device: frozenset = frozenset()
    #: functions whose body moves tensors to the accelerator (a ``collate_fn`` that does so)
    device_functions: frozenset = frozenset()
    #: functions whose body pads (``tokenizer.pad(``, ``pad_sequence(``) and reads no file: a collate_fn
    #: over pre-tokenized rows, work a worker process would not take off the training loop
    pad_functions: frozenset = frozenset()
    calls: CallInfo = field(default_factory=CallInfo)  # the call graph's part of this file
    #: ``hash`` of the text scanned (this process's and its forks'): a file linted as it was indexed
    #: reuses the index's scan (:meth:`ProjectIndex.scan_of`) instead of scanning its text again
    digest: int = 0
    #: the code (comments left out) shards a model: FSDP (``fully_shard``, ``FullyShardedDataParallel``) or
    #: DeepSpeed (``deepspeed.initialize``), whose parameter all-gathers fail under inference_mode on older torch
    shards: bool = False
    #: loss functions, and loss classes through ``__call__``/``forward``, that return the batch's sum (``* bs``)
    batch_sum: frozenset = frozenset()
    #: the code loads trained weights into models (``from_pretrained``, ``load_state_dict(..., strict=False)``, a
    #: state-dict converter): changing a layer's parameters anywhere in the project breaks those weights
    loads_weights: bool = False
    #: the file's own models are pretrained or ported: the above, a ``pretrained`` option, or a notice that the
    #: file was "modified from" a URL
    pretrained: bool = False
    ddp_helpers: frozenset = frozenset()  # functions that wrap a model in DistributedDataParallel

    def assigned_once(self, name: str) -> bool:
        return name in self.module_once


def scan_source(text: str, path: str = "") -> ModuleInfo:
    """Index one source text (no parse; comments and strings may add names, never remove)."""
    classes = {m[1]: tuple(b.strip() for b in (m[2] or "").split(",") if b.strip() and "=" not in b)
               for m in _CLASS.finditer(text)}
    imports = {}
    for m in _FROM.finditer(text):
        for part in m[2].strip("() \t\r\n").split(","):
            part = part.split("#", 1)[0].strip()
            if not part or part == "*":
                continue
            name, _, alias = part.partition(" as ")
            imports[(alias or name).strip()] = (m[1], name.strip())
    in_memory = set()
    datasets = {name for name, bases in classes.items() if any(b.endswith("Dataset") for b in bases)}
    class_starts = [(m.start(), len(m.group(0)) - len(m.group(0).lstrip(" \t")), m[1]) for m in _CLASS.finditer(text)]
    for m in _GETITEM.finditer(text):
        indent = len(m[1])
        owner = [name for start, ind, name in class_starts if start < m.start() and ind < indent]
        body = []
        for line in text[m.end():].splitlines():
            if line.strip() and len(line) - len(line.lstrip(" \t")) <= indent:
                break
            body.append(line.split("#", 1)[0])
        calls = {c.rsplit(".", 1)[-1] for c in _CALLED.findall("\n".join(body))}
        if owner:
            datasets.add(owner[-1])
        if owner and body and calls <= _CHEAP_CALLS and not any(w in "\n".join(body) for w in ("for ", "while ", "open")):
            in_memory.add(owner[-1])
    sharded = "get_worker_info" in text
    assigned: dict = {}
    for m in _MODULE_ASSIGN.finditer(text):
        assigned[m[1]] = assigned.get(m[1], 0) + 1
    unsharded = frozenset() if sharded else frozenset(
        name for name, bases in classes.items() if any(b.rsplit(".", 1)[-1] == "IterableDataset" for b in bases))
    return ModuleInfo(path, classes, frozenset(m[2] for m in _DEF.finditer(text)),
                      frozenset(m[1] for m in _NO_GRAD_DEF.finditer(text)),
                      frozenset(_METHOD_CALL.findall(text)), imports, frozenset(in_memory), unsharded,
                      frozenset(re.findall(r"(?<![\w.])([A-Z]\w*)[ \t]*\(", text)), frozenset(datasets),
                      frozenset(a or b for a, b in _IMPORT.findall(text)),
                      frozenset(k for k, n in assigned.items() if n == 1),
                      on_device(text, datasets),
                      device_functions(text) if TO_DEVICE.search(text) else frozenset(),
                      pad_functions(text) if ".pad(" in text or "pad_sequence(" in text else frozenset(),
                      scan_calls(text, module_stem(path)), hash(text), _SHARDS.search(re.sub(r"#[^\n]*", "", text)) is not None,
                      batch_sum_losses(text), *loads_pretrained(text), ddp_helpers(text))


@functools.lru_cache(maxsize=65536)
def _scan_file(path: str, size: int, mtime_ns: int) -> ModuleInfo:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ModuleInfo(path)
    if is_notebook(path):  # scan the notebook's code cells, not its JSON
        try:
            text = read_notebook(text).python
        except ParseError:
            return ModuleInfo(path)  # reported when the notebook itself is linted
    return scan_source(text, path)


def _project_root(path: str) -> str:
    """The folder above the file's outermost package; a folder without ``__init__.py`` inside a package (a
    namespace subpackage: torchtitan's ``components/``) is part of it."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        parent = os.path.dirname(folder)
        if parent == folder or not (os.path.isfile(os.path.join(folder, "__init__.py"))
                                    or os.path.isfile(os.path.join(parent, "__init__.py"))):
            return folder
        folder = parent


@dataclass(frozen=True)
class ProjectIndex:
    """Modules of the linted files, by absolute path; queries are per project (see module doc)."""

    modules: dict = field(default_factory=dict)  # absolute path -> ModuleInfo
    roots: dict = field(default_factory=dict)  # absolute path -> project folder
    by_root: dict = field(default_factory=dict)  # project folder -> absolute paths under it
    importers: dict = field(default_factory=dict)  # dotted module name -> paths importing it
    _cache: dict = field(default_factory=dict, compare=False, repr=False)  # path -> sibling ModuleInfos

    def _siblings(self, path: str):
        """The linted files under ``path``'s project folder, and those importing its module or a package
        of it by a dotted name of 2+ parts (``from timm.data import`` for ``timm/data/loader.py``)."""
        path = os.path.abspath(path)
        found = self._cache.get(path)
        if found is None:
            root = self.roots.get(path) or _project_root(path)
            parts = os.path.splitext(path)[0].split(os.sep)[1:]
            paths = set(self.by_root.get(root, ()))
            for j in range(len(parts), 0, -1):
                for i in range(j):
                    if j - i >= 2 or j == len(parts):
                        paths.update(self.importers.get(".".join(parts[i:j]), ()))
            found = self._cache[path] = [self.modules[p] for p in sorted(paths)]
        return found

    def calls_method(self, path: str, name: str) -> bool:
        """Some file of ``path``'s project calls ``.name(...)``."""
        return any(name in m.method_calls for m in self._siblings(path))

    def in_test_folder(self, path: str) -> bool:
        """``path`` lies in a folder named ``tests``/``test`` that holds unit-test modules among the linted
        files (``tests/kernels/test_layer_norm.py`` beside ``run_convergence.py``): test support code."""
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.basename(folder) not in ("tests", "test") and \
                os.path.basename(os.path.dirname(folder)) not in ("tests", "test"):
            return False
        key = ("tests", folder)
        if key not in self._cache:
            self._cache[key] = any(os.path.dirname(p) == folder and is_test_file(os.path.basename(p))
                                   for p in self.modules)
        return self._cache[key]

    def call_infos(self, path: str) -> list:  # the CallInfo of every file of ``path``'s project
        return [m.calls for m in self._siblings(path)]

    def repeated_names(self, path: str) -> tuple:  # definition keys run every step / every epoch (pitstop.lint.index.callgraph)
        key = ("step", os.path.abspath(path))
        if key not in self._cache:
            self._cache[key] = repeated_names(self.call_infos(path))
        return self._cache[key]

    def is_called(self, path: str, key: str) -> bool:
        """Some linted code of ``path``'s project calls the definition ``key`` (``name`` / ``.name``)."""
        cache = ("called", os.path.abspath(path))
        if cache not in self._cache:
            self._cache[cache] = called_keys(self.call_infos(path))
        return key in self._cache[cache]

    def pretrained(self, path: str) -> bool:
        """``path``'s models are pretrained or ported (ModuleInfo.pretrained), or some linted file of its project loads
        trained weights into models (ModuleInfo.loads_weights)."""
        info = self.modules.get(os.path.abspath(path))
        return info is not None and info.pretrained or any(m.loads_weights for m in self._siblings(path))

    def trains(self, path: str) -> bool:
        """Some linted file of ``path``'s project runs a training step (a loop or function calling backward or an
        optimizer step, or a framework's per-step method)."""
        return any(m.calls.step_calls for m in self._siblings(path))

    def shards(self, path: str) -> bool:
        """Some linted file of ``path``'s project shards a model with FSDP or DeepSpeed (in its code, not a comment)."""
        return any(m.shards for m in self._siblings(path))

    def no_grad_functions(self, path: str) -> frozenset:
        """Names of functions/methods decorated no_grad/inference_mode in ``path``'s project."""
        out: set = set()
        for m in self._siblings(path):
            out |= m.no_grad_functions
        return frozenset(out)

    def module_of(self, path: str, module: str) -> ModuleInfo | None:
        """The linted file that ``from <module> import ...`` in ``path`` names (relative dots,
        a sibling file, or a dotted path under the project), or None."""
        here = os.path.dirname(os.path.abspath(path))
        dots = len(module) - len(module.lstrip("."))
        rel = module.lstrip(".").replace(".", os.sep)
        bases = [here]
        if dots:
            for _ in range(dots - 1):
                here = os.path.dirname(here)
            bases = [here]
        else:
            bases.append(self.roots.get(os.path.abspath(path)) or _project_root(path))
        for base in bases:
            for cand in (os.path.join(base, rel + ".py"), os.path.join(base, rel, "__init__.py")):
                info = self.modules.get(cand)
                if info is not None:
                    return info
        return None

    def scan_of(self, path: str, text: str) -> ModuleInfo | None:
        """The index's scan of ``path`` when it was made from ``text`` (a file linted as it lies
        on disk; not a text a fix round changed), else None."""
        info = self.modules.get(os.path.abspath(path))
        return info if info is not None and info.digest == hash(text) else None

    def dataset_kind(self, path: str, name: str, _depth: int = 0) -> str | None:
        """``"on_device"`` / ``"in_memory"`` / ``"unsharded_iterable"`` / ``"other"`` for a Dataset class ``name``
        defined in, or imported into, ``path`` from the linted files; None when unknown."""
        info = self.modules.get(os.path.abspath(path))
        if info is None or _depth > 8:
            return None
        kind = dataset_kind(info, name)
        if kind is not None or name in info.classes:
            return kind
        imported = info.imports.get(name)
        target = self.module_of(path, imported[0]) if imported is not None else None
        return None if target is None else self.dataset_kind(target.path, imported[1], _depth + 1)

    def is_module_qualname(self, path: str, qualified: str) -> bool:
        """``model.Net`` (as resolved through ``path``'s imports) names a class of a linted file
        that subclasses nn.Module."""
        module, _, name = qualified.rpartition(".")
        target = self.module_of(path, module) if module else None
        return target is not None and self.is_module_class(target.path, name)

    def is_module_class(self, path: str, name: str, _depth: int = 0) -> bool:
        """``name`` (imported into ``path``) is a class subclassing nn.Module, followed through
        the linted files' imports and bases."""
        info = self.modules.get(os.path.abspath(path))
        if info is None or _depth > 8:
            return False
        if name in info.classes:
            for base in info.classes[name]:
                if _MODULE_BASE.match(base) or self.is_module_class(path, base.rsplit(".", 1)[-1], _depth + 1):
                    return True
            return False
        imported = info.imports.get(name)
        if imported is None:
            return False
        target = self.module_of(path, imported[0])
        return target is not None and self.is_module_class(target.path, imported[1], _depth + 1)


def dataset_kind(info: ModuleInfo, name: str) -> str | None:
    """The kind of Dataset class ``name`` as defined in ``info`` (see ProjectIndex.dataset_kind)."""
    if name in info.on_device:
        return "on_device"
    if name in info.in_memory:
        return "in_memory"
    if name in info.unsharded_iterable:
        return "unsharded_iterable"
    return "other" if name in info.datasets else None


def clear_caches() -> None:
    """Forget every cached scan and index (benchmarks: each repeat pays the pass, like a new process)."""
    _scan_file.cache_clear()
    index_for.cache_clear()


def build_index(paths) -> ProjectIndex:
    """Index the files at ``paths`` (unreadable ones are empty)."""
    modules, roots, by_root, importers = {}, {}, {}, {}
    for p in paths:
        ap = os.path.abspath(p)
        st = _stat(ap)
        if st is None:
            continue
        info = modules[ap] = _scan_file(ap, st.st_size, st.st_mtime_ns)
        root = roots[ap] = _project_root(ap)
        by_root.setdefault(root, []).append(ap)
        for name in info.imported_modules:
            importers.setdefault(name, []).append(ap)
    return ProjectIndex(modules, roots, by_root, importers)


def _stat(p: str):
    try:
        return os.stat(p)
    except OSError:
        return None


def index_signature(paths) -> tuple:
    """``((path, size, mtime_ns), ...)`` of the readable files among ``paths``: the key under which
    :func:`index_for` caches their index."""
    return tuple((p, st.st_size, st.st_mtime_ns) for p, st in ((p, _stat(p)) for p in paths) if st is not None)


@functools.lru_cache(maxsize=4)
def index_for(signature: tuple) -> ProjectIndex:
    """The index of the files of ``signature`` (:func:`index_signature`), cached per process: the
    lint workers, forked after the parent built it, ask for it per batch of files with the
    parent's signature and get the parent's copy instead of a pickled one (1-2 MB for a thousand
    files); files that ``--fix`` rewrites meanwhile do not invalidate it."""
    return build_index(p for p, _, _ in signature)
