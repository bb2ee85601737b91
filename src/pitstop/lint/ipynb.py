"""A Jupyter notebook's JSON as the Python text the rules see (see :mod:`pitstop.lint.notebook`):
code cells joined with boundary comments, IPython lines masked by placeholders, and back.
No dependency on the linter itself, so the project index can scan notebooks too."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pitstop.lint.findings import ParseError

__all__ = ["Notebook", "read_notebook", "is_notebook", "fixed_document", "cell_source"]

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


def cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _mask(text: str, hidden: list[str]) -> list[str]:
    lines = text.split("\n")
    if _is_cell_magic(text):  # a cell magic: the whole cell is not Python (never changed by a fix)
        hidden.append(text)
        return [_PLACEHOLDER.format(len(hidden) - 1)] + [""] * (len(lines) - 1)
    out = []
    for n, line in enumerate(lines):
        if _IPYTHON_LINE.match(line) or n == 0 and _PYTHON_CELL_MAGIC.match(line):
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
        for n, line in enumerate(_mask(cell_source(cell), hidden), start=1):
            joined.append(line)
            line_map.append((i + 1, n))
    return Notebook(doc, tuple(cells), "\n".join(joined) + "\n", tuple(line_map), tuple(hidden), indent)


#: cell magics whose body is Python run by IPython (timed, captured, profiled): the cell is linted as
#: Python below its first line (issue 31); any other cell magic (%%bash, %%writefile, ...) is not Python
_PYTHON_CELL_MAGIC = re.compile(r"^%%(?:time|timeit|capture|prun|debug)\b")


def _is_cell_magic(text: str) -> bool:
    """A cell whose first line is a cell magic that is not one of :data:`_PYTHON_CELL_MAGIC`."""
    return text.startswith("%%") and not _PYTHON_CELL_MAGIC.match(text) or \
        not text.startswith("%%") and text.lstrip().startswith("%%")


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
        old = cell_source(cell)
        new = texts.get(i, old)
        if _is_cell_magic(old) or new == old:
            continue
        changed.append(i)
        cell["source"] = new.splitlines(keepends=True) if isinstance(cell.get("source"), list) else new
    return doc, changed
