"""Jupyter notebooks (``.ipynb``), linted cell by cell the way ruff does.

The code cells are joined into one Python text (so an import in the first cell resolves a
name in the fifth), each cell after a boundary comment line. IPython lines that are not Python
(``%magic``, ``!shell``, ``x = !cmd``, ``obj?``) become ``pass`` placeholders at the same
indentation, and a cell that starts with a cell magic (``%%bash``, ``%%time`` ...) is left out
entirely: the rules never see them and no fix touches them. Findings (and fix edits) carry the
cell number and the line within the cell. ``--fix`` writes the notebook back as valid JSON in
its own indentation, replacing only the sources of the cells whose code changed, keeping each
source's form (a list of lines or one string).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from pitstop.lint.findings import Edit, FileError, FileResult, Finding, Fix
from pitstop.atomic import write_atomic
from pitstop.lint.runner import DEFAULT_MAX_FILE_SIZE, ParseError, fix_source, lint_source, read_source, rules_for

__all__ = ["Notebook", "read_notebook", "lint_notebook_file", "is_notebook"]

_BOUNDARY = "# pitstop: cell {}"
_BOUNDARY_RE = re.compile(r"^# pitstop: cell (\d+)$")
_PLACEHOLDER = "pass  # pitstop: ipython {}"
_PLACEHOLDER_RE = re.compile(r"^(?P<indent>[ \t]*)pass  # pitstop: ipython (?P<k>\d+)$")
# %magic / !shell at the start of a statement or of an assignment's value, ?help, help?; a line
# that starts `% (a, b)` or `!= b` continues a Python expression and is not one of them
_ESCAPE = r"(?:%%?[A-Za-z_]|![^=\s]|!\s)"
_IPYTHON_LINE = re.compile(rf"^\s*(?:{_ESCAPE}|[\w.\[\], ]+=\s*{_ESCAPE}|\?+[\w.]|[\w.]+\?{{1,2}}\s*$)")


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


@dataclass(frozen=True)
class Notebook:
    """A parsed notebook: the JSON document and the Python text the rules see."""

    doc: dict
    cells: tuple[int, ...]  # index into doc["cells"] of each code cell that is linted
    python: str  # the joined, masked code
    line_map: tuple[tuple[int, int], ...]  # joined line (0-based) -> (cell number, line in cell), (0, 0) on boundaries
    hidden: tuple[str, ...]  # the IPython lines behind the placeholders
    indent: int | None

    def locate(self, line: int) -> tuple[int, int]:
        """(cell number counted from 1 over all cells, line in that cell) of a joined line (1-based)."""
        return self.line_map[line - 1] if 0 < line <= len(self.line_map) else (0, line)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _mask(text: str, hidden: list[str]) -> list[str]:
    lines = text.split("\n")
    if _is_cell_magic(text):  # a cell magic: the whole cell is not Python (never changed by a fix)
        hidden.append(text)
        return [_PLACEHOLDER.format(len(hidden) - 1)] + [""] * (len(lines) - 1)
    out = []
    for line in lines:
        if _IPYTHON_LINE.match(line):
            hidden.append(line)
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + _PLACEHOLDER.format(len(hidden) - 1))
        else:
            out.append(line)
    return out


def read_notebook(text: str) -> Notebook:
    """Parse a notebook's JSON text; ParseError when it is not a notebook pitstop can lint."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not a notebook: invalid JSON ({exc.msg}, line {exc.lineno}, column {exc.colno})",
                         exc.lineno, exc.colno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise ParseError("not a notebook: no list of cells")
    language = (doc.get("metadata") or {}).get("language_info", {}).get("name", "python")
    if language != "python":
        raise ParseError(f"not a Python notebook (language {language!r})")
    m = re.search(r'^\{\s*\n( +)"', text)
    indent = len(m[1]) if m else None
    joined: list[str] = []
    line_map: list[tuple[int, int]] = []
    hidden: list[str] = []
    cells = []
    for i, cell in enumerate(doc["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        cells.append(i)
        joined.append(_BOUNDARY.format(i + 1))
        line_map.append((0, 0))
        for n, line in enumerate(_mask(_source(cell), hidden), start=1):
            joined.append(line)
            line_map.append((i + 1, n))
    return Notebook(doc, tuple(cells), "\n".join(joined) + "\n", tuple(line_map), tuple(hidden), indent)


def _in_cell(nb: Notebook, f: Finding) -> Finding:
    cell, line = nb.locate(f.line)
    end_cell, end_line = nb.locate(f.end_line)
    fix = f.fix
    if fix is not None:
        edits = []
        for e in fix.edits:
            _, el = nb.locate(e.line)
            _, eel = nb.locate(e.end_line)
            edits.append(dataclasses.replace(e, line=el, end_line=eel))
        fix = dataclasses.replace(fix, edits=tuple(edits))
    return dataclasses.replace(f, line=line, end_line=end_line if end_cell == cell else line, fix=fix, cell=cell)


def _is_cell_magic(text: str) -> bool:
    return text.lstrip().startswith("%%")


def _unmask(nb: Notebook, python: str) -> dict[int, str]:
    """Cell index -> source text, from a (fixed) joined text: placeholders restored, each cell
    ending as it did (joining added one newline after the last cell)."""
    out: dict[int, list[str]] = {}
    current = None
    lines = python.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        m = _BOUNDARY_RE.match(line)
        if m:
            current = int(m[1]) - 1
            out[current] = []
        elif current is not None:
            p = _PLACEHOLDER_RE.match(line)
            out[current].append(p["indent"] + nb.hidden[int(p["k"])].lstrip() if p else line)
    return {i: "\n".join(ls) for i, ls in out.items()}


def fixed_document(nb: Notebook, python: str) -> tuple[dict, list[int]]:
    """The notebook with the sources of changed cells replaced, and which cells changed."""
    doc = json.loads(json.dumps(nb.doc))
    changed = []
    texts = _unmask(nb, python)
    for i in nb.cells:
        cell = doc["cells"][i]
        old = _source(cell)
        new = texts.get(i, old)
        if _is_cell_magic(old) or new == old:
            continue
        changed.append(i)
        cell["source"] = new.splitlines(keepends=True) if isinstance(cell.get("source"), list) else new
    return doc, changed


def dump(doc: dict, indent: int | None) -> str:
    return json.dumps(doc, indent=indent if indent is not None else 1, ensure_ascii=False) + "\n"


def lint_notebook_file(path: str, display: str, codes: tuple[str, ...], *, fix: bool = False, unsafe: bool = False,
                       diff: bool = False, max_size: int = DEFAULT_MAX_FILE_SIZE, project=None) -> FileResult:
    """Lint (and with ``fix``/``diff`` fix) one notebook, like ``runner.lint_file`` does a
    Python file (``project``: the project index, when the runner builds one). Never raises for
    bad input."""
    result = FileResult(display)
    rules = rules_for(codes)
    context = () if project is None else (project, path)
    try:
        text, encoding = read_source(Path(path), max_size)
        nb = read_notebook(text)
        if not (fix or diff):
            result.findings = [_in_cell(nb, f) for f in lint_source(nb.python, display, rules, *context)]
            return result
        new, findings, result.fixed, result.note = fix_source(nb.python, display, rules, unsafe, *context)
        result.findings = [_in_cell(nb, f) for f in findings]
        if new == nb.python:
            return result
        doc, changed = fixed_document(nb, new)
        if not changed:
            return result
        if diff:
            result.diff = "".join(_cell_diff(nb, doc, i, display) for i in changed)
        else:
            write_atomic(path, dump(doc, nb.indent), encoding=encoding, follow_symlinks=True, keep_owner=True)
            result.written = True
    except ParseError as exc:
        result.error = FileError(display, str(exc), exc.line, exc.column)
    except OSError as exc:
        result.error = FileError(display, f"cannot write the fixed file: {exc}")
    return result


def _cell_diff(nb: Notebook, doc: dict, i: int, display: str) -> str:
    old, new = _source(nb.doc["cells"][i]) + "\n", _source(doc["cells"][i]) + "\n"
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{display}:cell {i + 1}", tofile=f"b/{display}:cell {i + 1}"))
