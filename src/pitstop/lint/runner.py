"""Lint one source text or one file: parse once, walk once, position the findings, suppress
``# noqa``, and apply fixes (only ever writing a file whose fixed text parses and compiles)."""

from __future__ import annotations

import ast
import difflib
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import libcst as cst

from pitstop.atomic import write_atomic
from pitstop.lint.context import FileContext, FixSpec, Pending
from pitstop.lint.findings import Edit, FileError, FileResult, LintFinding, Fix, ParseError
from pitstop.lint.nodes import strip_parens
from pitstop.lint.rule import SAFE
from pitstop.lint.spans import spans
from pitstop.lint.view import EVERYTHING, View

__all__ = ["lint_source", "fix_source", "lint_file", "rules_for", "all_rule_classes", "ParseError",
           "DEFAULT_MAX_FILE_SIZE", "is_valid_python", "compiles_here", "read_source", "bad_input_reported",
           "write_fixed", "MAX_NESTING"]

DEFAULT_MAX_FILE_SIZE = 2 * 1024 * 1024
MAX_FIX_ROUNDS = 10
#: the deepest syntax tree (levels of nested nodes) pitstop lint walks. A fixed bound, so that
#: whether a file is linted never depends on the interpreter's recursion limit, which other code
#: in the same process may have raised (torch.compile's inductor raises it to 2000). The walk
#: recurses about once per level; 500 levels leave room under Python's default limit of 1000.
MAX_NESTING = 500
_NEWLINE = re.compile(r"\r\n?|\n")
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?", re.I)
_FILE_NOQA = re.compile(r"#\s*pitstop:\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?\s*$", re.I)


# -- rules ------------------------------------------------------------------------------
_RULES: dict[str, list[type]] | None = None
_SLUGS: dict[str, str] = {}


def all_rule_classes() -> dict[str, list[type]]:
    """Every registered lint rule class, by code (loads the tip catalog once)."""
    global _RULES
    if _RULES is None:
        from pitstop import catalog

        rules: dict[str, list[type]] = {}
        for cls in catalog.implementations("L"):
            rules.setdefault(cls.tip, []).append(cls)
            _SLUGS[cls.tip] = catalog.get(cls.tip).slug
        _RULES = dict(sorted(rules.items()))
    return _RULES


def rules_for(codes) -> list[type]:
    table = all_rule_classes()
    return [cls for code in sorted(set(codes)) for cls in table.get(code, ())]


def slug(code: str) -> str:
    all_rule_classes()
    return _SLUGS.get(code, code.lower())


# -- one source text ---------------------------------------------------------------------
def _file_noqa(source: str) -> set[str] | None:
    """Codes silenced by ``# pitstop: noqa`` in the file's leading comment block
    (``{"*"}`` for all), or None."""
    for line in source.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            return None
        m = _FILE_NOQA.match(s)
        if m:
            return set(re.split(r"[\s,]+", m["codes"].upper())) if m["codes"] else {"*"}
    return None


def _parse(source: str, filename: str) -> cst.Module:
    try:  # CPython's parser first: exact messages, and it refuses what would crash libcst's
        depth = _depth(ast.parse(source, filename))
    except SyntaxError as exc:
        newer = _newer_syntax(source, exc)
        if newer is None:
            raise ParseError(f"SyntaxError: {exc.msg} (line {exc.lineno}, column {exc.offset})",
                             exc.lineno, exc.offset) from None
        return newer
    except (RecursionError, MemoryError) as exc:
        raise ParseError(f"expression nested too deeply ({type(exc).__name__})") from None
    except ValueError as exc:
        raise ParseError(str(exc)) from None
    if depth > MAX_NESTING:
        raise ParseError(f"expression nested too deeply ({depth} levels; pitstop lint walks at most {MAX_NESTING})")
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise ParseError(f"libcst: {str(exc).splitlines()[0]} (line {exc.raw_line}, column {exc.raw_column})",
                         exc.raw_line, exc.raw_column) from None
    except RecursionError:
        raise ParseError("expression nested too deeply (RecursionError)") from None


def _depth(tree: ast.AST) -> int:
    """Levels of nested nodes in ``tree`` (iterative: no recursion of its own). What
    ``ast.iter_child_nodes`` yields, read from ``_fields`` without a generator per node: this
    guard took ~9% of a file's lint."""
    deepest, stack, node_type = 0, [(tree, 1)], ast.AST
    pop, push = stack.pop, stack.append
    while stack:
        node, d = pop()
        if d > deepest:
            deepest = d
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, node_type):
                push((value, d + 1))
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        push((item, d + 1))
    return deepest


_NESTING_LIMIT = 100  # brackets; CPython's own parser stops at 200


def _newer_syntax(source: str, exc: SyntaxError) -> cst.Module | None:
    """The module when ``source`` is valid for a newer Python than this interpreter (PEP 695
    ``type X = ...`` and ``def f[T]()``, PEP 701 f-strings: libcst's parser knows them), else None.

    Only tried when the bracket nesting is shallow: CPython's parser is what keeps input that
    would overflow libcst's native parser away from it, and here it gave no verdict."""
    if "nested" in exc.msg or sys.version_info >= (3, 12):  # 3.12+ parses PEP 695/701 itself
        return None
    depth = deepest = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
    if deepest > _NESTING_LIMIT:
        return None
    try:
        return cst.parse_module(source)
    except (cst.ParserSyntaxError, RecursionError):
        return None


def compiles_here(source: str, filename: str = "<source>") -> bool:
    """Whether this interpreter can compile ``source`` (False for Python 3.12+ syntax on 3.11)."""
    try:
        compile(source, filename, "exec", dont_inherit=True, flags=ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def is_valid_python(source: str, filename: str = "<fixed>") -> bool:
    """Parses (CPython and libcst) and compiles: the bar every fixed text must clear."""
    return _checked(source, filename) is not None


def _checked(source: str, filename: str) -> cst.Module | None:
    """The libcst module of ``source`` if it parses (CPython and libcst, within the walk's nesting
    bound) and compiles, else None. A fixing round lints the module it returns instead of parsing
    the fixed text twice more (on the lint corpus's fixable files, ``--fix`` parsed each text three
    times a round)."""
    try:
        tree = ast.parse(source, filename)
        if _depth(tree) > MAX_NESTING:
            return None
        compile(tree, filename, "exec", dont_inherit=True)
        return cst.parse_module(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, cst.ParserSyntaxError):
        return None


def lint_source(source: str, filename: str, rules: list[type], project=None, path: str | None = None,
                view: View = EVERYTHING, module: cst.Module | None = None) -> list[LintFinding]:
    """Findings of ``rules`` in ``source`` (sorted, ``# noqa`` applied). Raises ParseError.

    ``project`` (a :class:`pitstop.lint.index.project.ProjectIndex`) lets rules look at the other
    linted files; ``path`` is where the file lies (default: ``filename``); ``view`` drops the findings of
    sub-patterns it does not select (preview ones, by default on the command line); ``module``, when
    given, is ``source`` already parsed by libcst (a fixing round's checked text)."""
    silenced = _file_noqa(source)
    if silenced == {"*"}:
        return []
    if module is None:
        module = _parse(source, filename)
    if silenced:
        rules = [r for r in rules if r.tip not in silenced]
    try:
        pending = FileContext(module, rules, filename, project, path, source).run()
    except RecursionError:
        raise ParseError("expression nested too deeply for the linter (RecursionError)") from None
    if not pending:
        return []
    starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
    wanted = [p.node for p in pending] + [node for p in pending if p.fix for node, _ in p.fix.edits]
    try:
        positions = spans(module, wanted)
    except RecursionError:
        raise ParseError("expression nested too deeply for the linter (RecursionError)") from None
    lines = source.splitlines()
    out = []
    seen = set()
    for p in pending:
        f = _finding(p, filename, module, positions, starts)
        if f is None or (f.code, f.line, f.column) in seen or _noqa(lines, f) or not view.selects(f.code, f.pattern):
            continue
        seen.add((f.code, f.line, f.column))
        out.append(f)
    return sorted(out, key=LintFinding.sort_key)


def _noqa(lines: list[str], f: LintFinding) -> bool:
    if f.line > len(lines) or "noqa" not in lines[f.line - 1].lower():
        return False
    m = _NOQA.search(lines[f.line - 1])
    if m is None:
        return False
    return not m["codes"] or f.code in re.split(r"[\s,]+", m["codes"].upper())


def _finding(p: Pending, filename, module, positions, starts) -> LintFinding | None:
    rng = positions.get(id(p.node))
    if rng is None:
        return None
    fix = _resolve_fix(p.fix, module, positions, starts) if p.fix else None
    return LintFinding(p.code, slug(p.code), p.message, filename, rng.line, rng.column + 1,
                       rng.end_line, rng.end_column + 1, fix, frequency=p.frequency, pattern=p.pattern,
                       concern=p.concern)


def _resolve_fix(spec: FixSpec, module, positions, starts) -> Fix | None:
    edits = []
    for node, new in spec.edits:
        rng = positions.get(id(node))
        if rng is None:
            return None
        content = new if isinstance(new, str) else module.code_for_node(strip_parens(new))
        start = starts[rng.line - 1] + rng.column
        end = starts[rng.end_line - 1] + rng.end_column
        edits.append(Edit(content, rng.line, rng.column + 1, rng.end_line, rng.end_column + 1, start, end))
    return Fix(spec.applicability, spec.message, tuple(sorted(edits, key=lambda e: e.start)), spec.layout)


# -- fixes -------------------------------------------------------------------------------
def _apply(source: str, fixes: list[Fix]) -> tuple[str, int]:
    """Apply non-overlapping fixes (first come first served); the rest wait for a later round."""
    taken: list[tuple[int, int]] = []
    chosen: list[Edit] = []
    n = 0
    for fix in sorted(fixes, key=lambda f: f.edits[0].start):
        if any(e.start < b and a < e.end or (e.start == e.end == a) for e in fix.edits for a, b in taken):
            continue
        taken += [(e.start, e.end) for e in fix.edits]
        chosen += fix.edits
        n += 1
    for e in sorted(chosen, key=lambda e: e.start, reverse=True):
        source = source[: e.start] + e.content + source[e.end:]
    return source, n


def fix_source(source: str, filename: str, rules: list[type], unsafe: bool = False, project=None,
               path: str | None = None, view: View = EVERYTHING) -> tuple[str, list[LintFinding], int, str]:
    """Apply fixes until none applies. Returns (text, remaining findings, fixes applied, note).

    Only the findings ``view`` shows are fixed (issue 42: ``--fix`` acts on what the report shows; without
    ``--all`` a one-time finding keeps its code as it is). A fix that changes a state_dict layout is unsafe.

    Every round's result must parse and compile; a fix that breaks that is dropped (tried
    alone), so the returned text is always valid Python. A file in syntax newer than this
    interpreter (linted through libcst) gets no fixes: they could not be compiled to check them.
    Raises ParseError for the input."""
    findings = lint_source(source, filename, rules, project, path, view)
    applied, note, refused = 0, "", set()
    if any(f.fix and (f.fix.applicability == SAFE or unsafe) and view.shows(f) for f in findings) \
            and not compiles_here(source, filename):
        return source, findings, 0, (f"fixes not applied: the file uses syntax newer than Python "
                                     f"{sys.version_info[0]}.{sys.version_info[1]}, which runs pitstop and "
                                     "must compile a fixed file to check it")
    for _ in range(MAX_FIX_ROUNDS):
        todo = [f for f in findings if f.fix and (f.fix.applicability == SAFE or unsafe) and view.shows(f)
                and _key(f, source) not in refused]
        if not todo:
            return source, findings, applied, note
        new, n = _apply(source, [f.fix for f in todo])
        module = _checked(new, filename)
        if module is None:
            n = 0
            for f in todo:
                trial, _ = _apply(source, [f.fix])
                module = _checked(trial, filename)
                if module is not None:
                    new, n = trial, 1
                    break
                refused.add(_key(f, source))
                note = f"a {f.code} fix was not applied: the fixed file would not compile"
            if n == 0:
                continue
        source, applied = new, applied + n
        findings = lint_source(source, filename, rules, project, path, view, module)
    note = note or f"fixes did not settle after {MAX_FIX_ROUNDS} rounds"
    return source, findings, applied, note


def _key(f: LintFinding, source: str) -> tuple:
    e = f.fix.edits[0]
    return (f.code, source[e.start:e.end], e.content)


# -- one file ----------------------------------------------------------------------------
def read_source(path: Path, max_size: int = DEFAULT_MAX_FILE_SIZE) -> tuple[str, str]:
    """(text, encoding) of a Python file, or ParseError with a clear reason."""
    try:
        size = path.stat().st_size
        if max_size and size > max_size:
            raise ParseError(f"file is {size / 2**20:.1f} MiB, over the {max_size / 2**20:.1f} MiB limit "
                             "(generated code?); raise it with --max-file-size")
        data = path.read_bytes()
    except OSError as exc:
        raise ParseError(f"cannot read: {exc.strerror or exc}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ParseError(f"binary file (NUL byte at offset {nul})")
    try:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:  # no usable coding cookie: the bytes are not UTF-8
            data.decode("utf-8")
            raise ParseError(f"bad encoding declaration: {exc.msg}") from None
        return data.decode(encoding), encoding
    except (UnicodeDecodeError, LookupError) as exc:
        where = f" (byte 0x{data[exc.start]:02x} at offset {exc.start})" if isinstance(exc, UnicodeDecodeError) else ""
        raise ParseError(f"not valid {getattr(exc, 'encoding', 'text')}{where}") from None


def lint_file(path: str, display: str, codes: tuple[str, ...], *, fix: bool = False, unsafe: bool = False,
              diff: bool = False, max_size: int = DEFAULT_MAX_FILE_SIZE, project=None,
              view: View = EVERYTHING) -> FileResult:
    """Lint (and with ``fix``/``diff`` fix) one file. Never raises for bad input."""
    result = FileResult(display)
    rules = rules_for(codes)
    with bad_input_reported(result):
        source, encoding = read_source(Path(path), max_size)
        if not (fix or diff):
            result.findings = lint_source(source, display, rules, project, path, view)
            return result
        new, result.findings, result.fixed, result.note = fix_source(source, display, rules, unsafe, project, path,
                                                                     view)
        if new != source:
            if diff:
                result.diff = "".join(difflib.unified_diff(
                    source.splitlines(keepends=True), new.splitlines(keepends=True),
                    fromfile=f"a/{display}", tofile=f"b/{display}"))
            else:
                write_fixed(result, path, new, encoding,
                            relint=lambda: lint_source(source, display, rules, project, path, view))
    return result


@contextmanager
def bad_input_reported(result: FileResult) -> Iterator[None]:
    """A file that cannot be read or parsed ends its lint with ``result.error``, not an exception."""
    try:
        yield
    except ParseError as exc:
        result.error = FileError(result.filename, str(exc), exc.line, exc.column)
    except OSError as exc:
        result.error = FileError(result.filename, f"cannot read: {exc.strerror or exc}")


def write_fixed(result: FileResult, path: str, text: str, encoding: str,
                relint: Callable[[], list[LintFinding]]) -> None:
    """Write the fixed ``text`` over ``path`` atomically (symlinks followed: the file they point to
    is rewritten and links stay links; mode and owner kept). When it cannot be written nothing was:
    the findings are those of the unchanged file (``relint()``), nothing counts as fixed, and
    ``result.error`` says why."""
    try:
        write_atomic(path, text, encoding=encoding, follow_symlinks=True, keep_owner=True)
    except OSError as exc:
        result.findings, result.fixed, result.note = relint(), 0, ""
        result.error = FileError(result.filename, f"cannot write the fixed file: {exc.strerror or exc}")
        return
    result.written = True
