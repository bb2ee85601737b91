"""The bounded call graph of the linted files, from the project index's line scan (issue 31).

Per file (:func:`scan_calls`, no parse): the names each function calls (the last part of every
``name(`` / ``obj.name(``), the names called inside a training loop (a ``for``/``while`` block
that calls ``.backward(`` or an optimizer's ``.step(``) or a framework's per-step method, and the
functions whose own body synchronizes with the device: a host read (``.item()``, ``.tolist()``,
``.numpy()``) or ``torch.cuda.synchronize()``.

Across the files of one project (:func:`per_step_names`, :func:`sync_chain`): which function names
run every step, and the chain of calls from a call in a training step down to a sync
(``train_step -> Timer.stop -> synchronize``), at most :data:`MAX_DEPTH` calls deep. A sync under
``if self.flag:`` / ``if flag:`` is followed only where some file of the project sets the flag ``True``
(a timer's ``cuda_sync``); a sync or call under any other test of a parameter or attribute, and a host
read of a value with no device evidence in the helper, are not followed (:mod:`pitstop.lint.index.chainguard`:
a finding through helpers needs evidence that the sync runs and reads the device). Names are
matched by name across files: a method called as ``obj.stop()`` is followed only when one linted
function of the project has that name (a unique definition), so ``update``/``step`` defined by ten
classes are never guessed at.
"""

from __future__ import annotations

import bisect
import re
import sys
from typing import Iterable

from pitstop.lint.index.chainguard import (device_read, evident, evident_names, imported_names, local_names, parameters,
                                     requirements, statements)
from pitstop.lint.index.calltags import Imports, call_tags, function_key, imports_of, resolve
from pitstop.lint.guards import split_statements

__all__ = ["CallInfo", "scan_calls", "per_step_names", "repeated_names", "called_keys", "sync_chain", "MAX_DEPTH"]

MAX_DEPTH = 4
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_CLASS = re.compile(r"^([ \t]*)class[ \t]+(\w+)", re.M)
_LOOP = re.compile(r"^([ \t]*)(?:for|while)\b[^\n]*:[ \t]*(?:#[^\n]*)?$", re.M)
#: a loop over epochs, steps or batches: ``for epoch in range(n)``, ``for batch in loader``
_REPEAT = re.compile(r"^[ \t]*(?:for|while)\b[^\n]*(?:epoch|step|iter|batch|loader)", re.I)
_STEP_MARK = re.compile(r"\.(?:manual_)?backward\(|\b\w*(?:optim|opt|optimizer|scaler)\w*\.step\(|"
                        r"\w\(\s*\w*loss\w*\s*,\s*\w*(?:optim|opt)\w*\s*[,)]")  # loss_scaler(loss, optimizer, ...)
#: host reads: ``.numpy()`` only after ``.cpu()`` (a CUDA tensor's ``.numpy()`` raises: a bare one reads host memory)
_SYNC = re.compile(r"\.(item|tolist)\(\s*\)|\.cpu\(\s*\)\.(numpy)\(\s*\)|\b(synchronize)\(\s*\)")
#: an optimizer's lazy state initialisation (``if not state:``, ``if len(state) == 0:``, ``if "q" not in state:``):
#: runs at the first step only
_LAZY_INIT = re.compile(r"^[ \t]*if[ \t]+(?:not[ \t]+\w*state[ \t]*:|len\(\w*state\)[ \t]*==[ \t]*0[ \t]*:|"
                        r"[^\n]+[ \t]not[ \t]+in[ \t]+\w*state[ \t]*:)")
_CPU = re.compile(r"\.(cpu)\(\s*\)")
#: ``flag: bool = False``, ``flag=False``, ``self.flag = False`` / the same with ``True``
_SET_FALSE = re.compile(r"\b([A-Za-z_]\w*)[ \t]*(?::[ \t]*bool[ \t]*)?=[ \t]*False\b")
_SET_TRUE = re.compile(r"\b([A-Za-z_]\w*)[ \t]*(?::[ \t]*bool[ \t]*)?=[ \t]*True\b")
_DEVICE = re.compile(r"\.cuda\(|[\"']cuda|cuda\.current_device|device=")
_STEP_METHODS = ("training_step", "compute_loss", "on_train_batch_end", "on_step_end", "train_step")


class CallInfo:
    """What one file's functions call (see the module docstring)."""

    __slots__ = ("calls", "step_calls", "syncs", "owners", "repeat_calls", "sure", "set_true", "called", "ambiguous",
                 "stem")

    def __init__(self, calls=None, step_calls=frozenset(), syncs=None, owners=None, repeat_calls=frozenset(),
                 sure=None, set_true=frozenset(), called=frozenset(), ambiguous=frozenset(), stem=""):
        self.stem: str = stem  # the module's name (``train`` of train.py): function keys are ``stem:name``
        #: definition key (``stem:name`` of a function, ``.name`` of a method) -> the call tags of its body
        #: (:func:`pitstop.lint.index.calltags.call_tags`)
        self.calls: dict = calls or {}
        self.called: frozenset = called  # every call tag of the file (module level included)
        self.ambiguous: frozenset = ambiguous  # method keys two classes of the file define
        self.step_calls: frozenset = step_calls
        #: function name -> [(line, "item"/"synchronize"/..., flags that must be on)] of the syncs that run
        #: whenever it does and read the device (:mod:`pitstop.lint.index.chainguard`), in line order
        self.syncs: dict = syncs or {}
        self.owners: dict = owners or {}  # definition key -> class name ("" for a function)
        self.repeat_calls: frozenset = repeat_calls  # names called in a loop over epochs/steps/batches
        #: function name -> {called name: (flags that must be on, one set per call site that runs whenever it does)}
        self.sure: dict = sure or {}
        self.set_true: frozenset = set_true  # names this file sets or passes ``True`` (``cuda_sync=True``)


def _body(lines: list[str], first: int, indent: int) -> list[tuple[int, str]]:
    """(0-based line, code without comment) of the block under ``lines[first]``."""
    out = []
    for j in range(first + 1, len(lines)):
        code = lines[j].split("#", 1)[0]
        if code.strip() and len(code.expandtabs()) - len(code.expandtabs().lstrip()) <= indent:
            break
        out.append((j, code))
    return out


def _indent(code: str) -> int:
    return len(code.expandtabs()) - len(code.expandtabs().lstrip())


def _own_body(own: list[tuple[int, str]], ctx: tuple, params: list[str], imports: Imports) -> tuple[list, dict]:
    """(syncs, sure calls) of a function's own body (nested defs left out), each only where it runs whenever
    the function does (see :mod:`pitstop.lint.index.chainguard`): syncs as ``[(line, what, flags, parameter)]`` in
    line order (a host read only of a value with device evidence, or of a parameter, ``(position, name)``, in
    which the caller must pass one; a ``.cpu()`` only in a body that also names a CUDA device), calls as
    ``{name: (flags, ...)}``."""
    stmts = statements(own)
    ctx = (local_names(stmts), *ctx)
    known = evident_names(stmts)
    device = any(_DEVICE.search(st.code) for st in stmts)
    syncs: list = []
    sure: dict = {}
    for k, st in enumerate(stmts):
        need = requirements(stmts, k, ctx)
        if need is None:
            continue
        for n in call_tags(st.code, imports):
            sure.setdefault(n, set()).add(need)
        hits = [(m.start(), next(g for g in m.groups() if g)) for m in _SYNC.finditer(st.code)]
        if device:
            hits += [(m.start(), "cpu") for m in _CPU.finditer(st.code)
                     if not st.code.startswith(".numpy(", m.end())]
        for at, what in sorted(hits):
            read = True if what == "synchronize" else device_read(st.code, at, known, params)
            if read:
                syncs.append((st.line + 1, what, need, None if read is True else (params.index(read), read)))
    return syncs, {n: tuple(v) for n, v in sure.items()}


def _first_step_only(own: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``own`` without the blocks of a lazy state initialisation (:data:`_LAZY_INIT`)."""
    out, skip = [], None
    for j, code in own:
        ind = _indent(code)
        if skip is not None and ind > skip:
            continue
        skip = ind if _LAZY_INIT.match(code) else None
        out.append((j, code))
    return out


def _owners(text: str, starts: list[int]) -> dict:
    """0-based line of each ``def`` -> the class it is a method of ("" for a function, nested ones included)."""
    marks = sorted([(bisect.bisect_right(starts, m.start()) - 1, len(m[1].expandtabs()), "class", m[2])
                    for m in _CLASS.finditer(text)] +
                   [(bisect.bisect_right(starts, m.start()) - 1, len(m[1].expandtabs()), "def", m[2])
                    for m in _DEF.finditer(text)])
    out, stack = {}, []
    for line, ind, kind, name in marks:
        while stack and stack[-1][0] >= ind:
            stack.pop()
        if kind == "def":
            out[line] = stack[-1][2] if stack and stack[-1][1] == "class" else ""
        stack.append((ind, kind, name))
    return out


def _guarded(code_lines: list[tuple[int, str]], imports: Imports) -> tuple[set, set]:
    """(call tags that run whenever the block does, call tags that run every N steps): lines under a once-guard
    (``if ni == 0:``) are in neither (:func:`pitstop.lint.guards.split_statements`)."""
    plain, periodic, _ = split_statements(statements(code_lines))
    return (set().union(*(call_tags(st.code, imports) for st in plain)) if plain else set(),
            set().union(*(call_tags(st.code, imports) for st in periodic)) if periodic else set())


def scan_calls(text: str, stem: str = "") -> CallInfo:
    """The call graph's part of one file (``stem``: its module's name, :func:`pitstop.lint.index.calltags.module_stem`)."""
    set_true = frozenset(m[1] for m in _SET_TRUE.finditer(text))
    imports = imports_of(text, stem)
    called_anywhere = frozenset(call_tags(text, imports))
    if "def " not in text:
        return CallInfo(set_true=set_true, called=called_anywhere, stem=stem)
    lines = text.split("\n")  # as ``starts`` counts them: splitlines() also breaks at \x0c and \u2028
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    owner_of = _owners(text, starts)
    ctx = (imported_names(text), frozenset(m[1] for m in _SET_FALSE.finditer(text)))
    calls: dict = {}
    syncs: dict = {}
    sure: dict = {}
    owners: dict = {}
    step: set = set()
    repeat: set = set()
    seen: set = set()
    ambiguous: set = set()
    for m in _DEF.finditer(text):
        name, indent = m[2], len(m[1].expandtabs())
        first = bisect.bisect_right(starts, m.start()) - 1
        owner = owner_of.get(first, "")
        key = f".{name}" if owner else function_key(stem, name)
        body = _body(lines, first, indent)
        own = [(j, code) for j, code in body if len(code.expandtabs()) - len(code.expandtabs().lstrip()) > indent]
        own = _first_step_only(own)
        called = set().union(*(call_tags(code, imports) for _, code in own)) if own else set()
        if key in seen:  # defined twice: names merged, no sync or sure call claimed
            if owner and owners.get(key) != owner:
                ambiguous.add(key)  # two classes of the file define the method
            calls[key] = calls[key] | frozenset(called)
            syncs.pop(key, None)
            sure.pop(key, None)
            continue
        seen.add(key)
        calls[key] = frozenset(called)
        owners[key] = owner
        header = lines[first] + "".join(" " + code for _, code in body[:4])
        found, sure[key] = _own_body(own, ctx, parameters(header), imports)
        if found:
            syncs[key] = found
        text_own = "\n".join(code for _, code in own)
        if name in _STEP_METHODS or (_STEP_MARK.search(text_own) and not _LOOP.search(text_own)):
            every, every_n = _guarded(own, imports)  # a framework's step method, or one step per call
            step |= every
            repeat |= every_n
    loops = []  # (first line, block, trains)
    for m in _LOOP.finditer(text):
        first = bisect.bisect_right(starts, m.start()) - 1
        block = _body(lines, first, len(m[1].expandtabs()))
        loops.append((first, block, _STEP_MARK.search("\n".join(code for _, code in block)) is not None, m[0]))
    for first, block, trains, head in loops:
        # an epoch loop around a training loop trains too, but only the inner loop's body runs every step:
        # the rest of its block (``validate.run(...)``, a checkpoint) runs once per epoch
        inner = {j for f, b, t, _ in loops if t and b and block and block[0][0] <= f <= block[-1][0]
                 for j in [f] + [k for k, _ in b]} if trains else set()
        own = [(j, code) for j, code in block if j not in inner]
        every, every_n = _guarded(own, imports)
        if trains and not inner:
            step |= every
            repeat |= every_n
        elif trains or _REPEAT.match(head):
            repeat |= every | every_n
    return CallInfo(calls, frozenset(step), syncs, owners, frozenset(repeat), sure, set_true, called_anywhere,
                    frozenset(ambiguous), stem)


def _defined(infos: Iterable) -> dict:
    """definition key -> [CallInfo defining it]."""
    out: dict = {}
    for info in infos:
        for name in info.calls:
            out.setdefault(name, []).append(info)
    return out


def repeated_names(infos: list) -> tuple[frozenset, frozenset]:
    """(definition keys run every step, keys run every epoch, evaluation batch or N steps) of the project."""
    step = per_step_names(infos)
    roots = set().union(*(i.repeat_calls for i in infos)) if infos else set()
    return step, per_step_names(infos, roots) - step


def called_keys(infos: list) -> frozenset:
    """Definition keys of the project that some linted code calls (any frequency)."""
    defined = _defined(infos)
    tags = set().union(*(i.called for i in infos)) if infos else set()
    return frozenset(k for k in (resolve(t, defined) for t in tags) if k is not None)


def per_step_names(infos: list, roots: set | None = None) -> frozenset:
    """Definition keys (:func:`resolve`) of the project that run every training step: called from a training
    loop or a per-step method, or from a function that is, up to :data:`MAX_DEPTH` calls deep (``roots``:
    start from these call tags instead)."""
    defined = _defined(infos)
    tags = roots if roots is not None else set().union(*(i.step_calls for i in infos)) if infos else set()
    frontier = {k for k in (resolve(t, defined) for t in tags) if k is not None}
    found = set(frontier)
    for _ in range(MAX_DEPTH):
        nxt = set()
        for key in frontier:
            for info in defined.get(key, ()):
                nxt |= {k for k in (resolve(t, defined) for t in info.calls[key]) if k is not None}
        frontier = nxt - found
        found |= frontier
        if not frontier:
            break
    return frozenset(found)


def sync_chain(name: str, here, infos: list, method: bool, argument=None) -> tuple[list[str], int, str, object] | None:
    """The shortest chain of calls from the function ``name`` (a definition key: ``.name`` for a method;
    called in a training step of the file whose CallInfo is ``here``) to a sync: (labels, line of the sync,
    what, CallInfo holding it). ``method``: the call is ``obj.name()`` of an object other than ``self``
    (followed only when one class of the project defines it, :func:`resolve`). ``argument(position,
    name)``: the source of what the call passes for that parameter, or None; a host read of ``name``'s own
    parameter is followed only when that is a device value (:func:`pitstop.lint.index.chainguard.evident`)."""
    defined = _defined(infos)

    def lookup(tag: str, origin) -> tuple[str, object] | None:
        """(definition key, CallInfo) a call tag reaches: the caller's own file first for plain and self calls."""
        key = "." + tag[1:] if tag[:1] == "@" else tag
        if tag[:1] != "." and origin is not None and key in origin.calls:
            return key, origin
        key = resolve(tag, defined, common=False) if tag[:1] == "." else key
        found = defined.get(key, ()) if key is not None else ()
        return (key, found[0]) if len(found) == 1 else None

    if not method and here is not None and name in here.calls:
        start = (name, here)
    else:
        start = lookup(name if not method else name, None if method else here)
    if start is None:
        return None
    switched_on = set().union(*(i.set_true for i in infos))  # flags some file of the project sets True
    queue = [([start[0]], [start[1]])]
    seen = {start[0]}
    while queue:
        chain, where = queue.pop(0)
        last, info = chain[-1], where[-1]
        for line, what, need, param in info.syncs.get(last, ()):
            passed = argument(*param) if param is not None and argument is not None and len(chain) == 1 else None
            if need <= switched_on and (param is None or (passed is not None and evident(passed))):
                return [_label(n, i) for n, i in zip(chain, where)] + [what], line, what, info
        if len(chain) > MAX_DEPTH:
            continue
        for callee, needs in sorted(info.sure.get(last, {}).items()):
            if not any(need <= switched_on for need in needs):
                continue  # called only on a condition: not every time ``last`` runs
            target = lookup(callee, info)
            if target is not None and target[0] not in seen:
                seen.add(target[0])
                queue.append((chain + [target[0]], where + [target[1]]))
    return None


def _label(key: str, info) -> str:
    owner = info.owners.get(key, "")
    return f"{owner}.{key.lstrip('.')}" if owner else key.lstrip(".").split(":", 1)[-1]
