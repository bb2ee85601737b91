"""When a sync inside a helper may be reported through a chain of calls (issue 31, third round).

A finding reached through a helper (``train_step -> log_metrics -> item``) claims two things the line
scan of :mod:`pitstop.lint.index.callgraph` must have evidence for, or stay quiet (precision beats recall):

- **the sync runs whenever the helper does.** Each statement of a helper's own body gets the flags that
  must be on for it to run (:func:`requirements`), or None when it runs only on some condition the scan
  cannot decide: under an ``if`` (or ``elif`` / ``else``, or after an ``if ...: return``) whose test reads
  a parameter, an attribute (``self.x``) or a module-level name, or in an ``except`` block. Tests on the
  helper's own locals (``if p.grad is not None``, ``if world_size > 1``) and calls (``if
  dist.is_initialized()``) do not make it conditional; a device check (``torch.cuda.is_available()``) is
  taken as true. A bare flag (``if self.sync:``) runs when some file of the project sets it ``True``
  (the flag is returned, checked across files by the call graph); its ``else`` when the file declares
  it ``False``. The calls from one helper to the next are judged the same way.
- **a host read reads a device value** (:func:`device_read`): the receiver of ``.item()``,
  ``.tolist()``, ``.cpu()`` is a loss (a name with ``loss`` in it), a gradient (``.grad``, a name
  ``grad`` or ``*_grad``), logits, a model's output or parameters (``model(...)``, ``net(...)``,
  ``criterion(...)``, ``.parameters()``), a value put on a device in the helper (``.cuda()``,
  ``.to(device)``, ``device=``), or a local computed from one of those (``acc = (output.argmax(1) ==
  y).float().mean()``). A parameter of the first helper is judged by what the calling step passes
  (:func:`evident` of the argument: ``as_float(loss)``); one of unknown origin (a count tensor built
  with ``torch.from_numpy`` and exchanged over gloo) is not evidence.
"""

from __future__ import annotations

import re

__all__ = ["Statement", "statements", "requirements", "device_read", "evident", "evident_names", "imported_names",
           "local_names", "parameters"]

_HEAD = re.compile(r"^(if|elif|else|for|while|with|try|except|finally|def|async|class)\b")
_EXIT = re.compile(r"(?:^|:)\s*(?:return|raise|continue)\b")
_WORD = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(\s*\()?")
_STRING = re.compile(r"(?:[rbuf]{0,2})(\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"[^\"\n]*\"|'[^'\n]*')")
_ASSIGN = re.compile(r"^([\w\s,()\[\]*]+?)\s*(?:[-+*/|&@]|//)?=(?!=)\s*(.+)$")
_FOR = re.compile(r"^(?:async\s+)?for\s+([\w\s,()\[\]*]+?)\s+in\s+(.+?):?$")
_COMP = re.compile(r"\bfor\s+([\w\s,()]+?)\s+in\s+(.+?)(?=\s+for\b|\s+if\b|[\])}]|$)")
_AS = re.compile(r"\bas\s+(\w+)")
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+([^\n#]+)", re.M)
_DEVICE_CHECK = re.compile(r"\b(?:is_available|is_cuda|cuda|is_initialized|device_count)\b")
#: device evidence inside an expression
_EVIDENCE = re.compile(r"\.grad\b|\.cuda\(|\bdevice\s*=|\.to\(\s*[\w.]*dev|\.to\(\s*f?[\"']cuda|"
                       r"parameters\(|(?<![\w.])(?:self\.)?\w*(?:model|net|criterion|encoder|decoder|backbone|"
                       r"loss_fn|loss_func)\s*\(")
#: names that say what they hold: a gradient, logits
_NAMED = re.compile(r"(?:^|_)(?:grad|grads|logits)$")
_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "None", "True", "False", "if", "else", "for", "lambda",
                       "len", "isinstance", "hasattr", "getattr", "any", "all", "int", "float", "str", "bool",
                       "type", "callable", "range", "min", "max", "abs", "sum", "list", "tuple", "dict", "set",
                       "zip", "enumerate", "sorted", "id", "print", "await", "yield", "return"})


class Statement:
    """One logical line of a function body: 0-based first line, indent, code (continuations joined)."""

    __slots__ = ("line", "indent", "code")

    def __init__(self, line: int, indent: int, code: str):
        self.line, self.indent, self.code = line, indent, code


def statements(body: list[tuple[int, str]]) -> list[Statement]:
    """The logical lines of ``body`` ((0-based line, code without comment) pairs)."""
    out: list[Statement] = []
    depth = 0
    for j, code in body:
        if not code.strip():
            continue
        if depth > 0 and out:
            out[-1].code += " " + code.strip()
        else:
            text = code.expandtabs()
            out.append(Statement(j, len(text) - len(text.lstrip()), code.strip()))
        bare = _STRING.sub('""', code)
        depth = max(0, depth + sum(bare.count(c) for c in "([{") - sum(bare.count(c) for c in ")]}"))
    return out


def imported_names(text: str) -> frozenset:
    """Names a file binds by ``import`` (``np`` of ``import numpy as np``, ``dist``, ``F``)."""
    out = set()
    for m in _IMPORT.finditer(text):
        for part in m[1].replace("(", " ").replace(")", " ").split(","):
            words = part.split()
            if words:
                out.add(words[-1] if len(words) >= 3 and words[-2] == "as" else words[0].split(".")[0])
    return frozenset(out)


def _targets(text: str) -> set[str]:
    return {w for w in re.findall(r"[A-Za-z_]\w*", text) if w not in _KEYWORDS}


def local_names(stmts: list[Statement]) -> set[str]:
    """Names a body binds: assignment and loop targets, ``as`` names."""
    out: set[str] = set()
    for s in stmts:
        m = _FOR.match(s.code) or _ASSIGN.match(s.code)
        if m and "." not in m[1]:
            out |= _targets(m[1])
        out |= set(_AS.findall(s.code))
    return out


def _test_of(code: str) -> str:
    """The test of an ``if``/``elif`` line, up to its top-level ``:``."""
    text = code.split(None, 1)[1] if " " in code else ""
    depth = 0
    for i, c in enumerate(text):
        depth += c in "([{"
        depth -= c in ")]}"
        if c == ":" and depth == 0:
            return text[:i]
    return text


def _roots(expr: str) -> list[tuple[str, bool]]:
    """(root name, called directly) of an expression: names not after a dot, strings and keywords left out."""
    bare = _STRING.sub('""', expr)
    comp = set()
    for m in _COMP.finditer(bare):
        comp |= _targets(m[1])
    return [(m[1], bool(m[2])) for m in _WORD.finditer(bare) if m[1] not in _KEYWORDS and m[1] not in comp]


def _part(expr: str, truthy: bool, ctx) -> frozenset | None:
    """Flags needed for one ``and``-part of a test to be ``truthy``; None when not decidable as running."""
    expr = expr.strip()
    if expr.startswith("not "):
        return _part(expr[4:], not truthy, ctx)
    locals_, imports, declared_false = ctx
    roots = _roots(expr)
    if _DEVICE_CHECK.search(expr) and all(r in imports or called or r in locals_ for r, called in roots):
        return frozenset() if truthy else None  # a device check: true on the accelerator
    flag = re.fullmatch(r"(?:self\.)?([A-Za-z_]\w*)", expr)
    if flag and flag[1] not in locals_:
        if truthy:
            return frozenset({flag[1]})  # on where some file of the project sets it True
        return frozenset() if flag[1] in declared_false else None
    if all(called or r in locals_ or r in imports for r, called in roots if r not in ("self", "cls")) and \
            not any(r in ("self", "cls") for r, _ in roots):
        return frozenset()  # the helper's own data or calls: no switch of the caller
    return None


def _condition(test: str, truthy: bool, ctx) -> frozenset | None:
    bare = _STRING.sub('""', test)
    if re.search(r"\bor\b", bare):
        return _part(test, truthy, ctx) if not re.search(r"\band\b", bare) else None
    parts = re.split(r"\band\b", test)
    if truthy or len(parts) == 1:
        need: set = set()
        for p in parts:
            got = _part(p, truthy, ctx)
            if got is None:
                return None
            need |= got
        return frozenset(need)
    left = [p for p in parts if not (_DEVICE_CHECK.search(p) and _part(p, True, ctx) == frozenset())]
    return _part(left[0], False, ctx) if len(left) == 1 else None  # not (on-device and X): not X


def _block_exits(stmts: list[Statement], k: int) -> bool:
    """The ``if`` at ``stmts[k]`` ends in ``return``/``raise``/``continue`` (one line or its block)."""
    if _EXIT.search(stmts[k].code.split(":", 1)[1] if ":" in stmts[k].code else ""):
        return True
    last = None
    for s in stmts[k + 1:]:
        if s.indent <= stmts[k].indent:
            break
        last = s
    return last is not None and _EXIT.search(last.code) is not None and last.code.split()[0] in (
        "return", "raise", "continue")


def requirements(stmts: list[Statement], k: int, ctx) -> frozenset | None:
    """Flags that must be on for ``stmts[k]`` to run whenever its function runs; None when it runs only
    on a condition the scan cannot decide (see the module docstring). ``ctx``: (names the body binds,
    names the file imports, names the file declares ``False``)."""
    need: set = set()
    level = stmts[k].indent
    chain_level = None  # the level of an elif/else whose earlier branches are being collected
    for j in range(k - 1, -1, -1):
        s = stmts[j]
        if s.indent > level:
            continue
        head = _HEAD.match(s.code)
        word = head[1] if head else ""
        if s.indent == level:
            if chain_level == level and word in ("if", "elif"):
                got = _condition(_test_of(s.code), False, ctx)
                if got is None:
                    return None
                need |= got
                if word == "if":
                    chain_level = None
                continue
            if word == "if" and chain_level is None and _block_exits(stmts, j):
                got = _condition(_test_of(s.code), False, ctx)
                if got is None:
                    return None
                need |= got
            continue
        level = s.indent  # an enclosing header
        if word in ("if", "elif"):
            got = _condition(_test_of(s.code), True, ctx)
            if got is None:
                return None
            need |= got
            chain_level = level if word == "elif" else None
        elif word == "else":
            chain_level = level
        elif word in ("except", "def", "async", "class"):
            return None
        else:
            chain_level = None
    return frozenset(need)


def _receiver(code: str, end: int) -> str:
    """The expression before ``code[end]`` (a ``.`` of ``.item()``)."""
    i = end
    while i > 0:
        c = code[i - 1]
        if c in ")]":
            depth, i = 0, i - 1
            while i >= 0:
                depth += code[i] in ")]"
                depth -= code[i] in "(["
                if depth == 0:
                    break
                i -= 1
        elif c.isalnum() or c in "_.":
            i -= 1
        else:
            break
    return code[max(i, 0):end]


def evident(expr: str, known: frozenset | set = frozenset()) -> bool:
    """``expr`` holds a device value: a loss, a gradient, a model's output or parameters, a value put on a
    device, or one of the ``known`` names."""
    if _EVIDENCE.search(expr):
        return True
    return any("loss" in r.lower() or _NAMED.search(r) or r in known for r, _ in _roots(expr))


def evident_names(stmts: list[Statement]) -> set[str]:
    """Locals of a body that hold a device value (see the module docstring), to a fixed point."""
    known: set[str] = set()
    for _ in range(3):
        before = len(known)
        for s in stmts:
            m = _FOR.match(s.code) or _ASSIGN.match(s.code)
            if m and "." not in m[1] and evident(m[2], known):
                known |= _targets(m[1])
        if len(known) == before:
            break
    return known


def parameters(header: str) -> list[str]:
    """The parameter names of a ``def`` line (continuations joined), ``self``/``cls`` and ``*``/``/`` left out."""
    start = header.find("(")
    out, depth, part = [], 0, ""
    for c in header[start + 1:]:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        if c == "," and depth == 0:
            out.append(part)
            part = ""
        else:
            part += c
    out.append(part)
    names = [re.match(r"\s*\**\s*([A-Za-z_]\w*)", p) for p in out]
    return [m[1] for m in names if m and m[1] not in ("self", "cls")]


def device_read(code: str, dot: int, known: set[str], params: list[str]) -> bool | str:
    """The host read whose ``.`` is at ``code[dot]`` reads a value with device evidence: True; or the
    parameter it reads (``t`` of ``def to_host(t): return t.cpu().numpy()``) when its only root is one,
    to be judged by what the caller passes; else False."""
    recv = _receiver(code, dot)
    if not recv:
        return False
    bound = set(known)
    for m in _COMP.finditer(code):  # [x.item() for x in sizes]: x is what sizes holds
        if evident(m[2], known):
            bound |= _targets(m[1])
    if evident(recv, bound):
        return True
    roots = {r for r, called in _roots(recv) if not called}
    return roots.pop() if len(roots) == 1 and roots <= set(params) else False
