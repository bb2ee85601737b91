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
from pathlib import Path

from pitstop.lint.findings import FileResult, LintFinding
from pitstop.lint.ipynb import Notebook, cell_source, fixed_document, is_notebook, read_notebook
from pitstop.lint.view import EVERYTHING, View
from pitstop.lint.runner import (DEFAULT_MAX_FILE_SIZE, bad_input_reported, fix_source, lint_source, read_source,
                                 rules_for, write_fixed)

__all__ = ["Notebook", "read_notebook", "lint_notebook_file", "is_notebook", "fixed_document"]


def _in_cell(nb: Notebook, f: LintFinding) -> LintFinding:
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


def dump(doc: dict, indent: int | None) -> str:
    return json.dumps(doc, indent=indent if indent is not None else 1, ensure_ascii=False) + "\n"


def lint_notebook_file(path: str, display: str, codes: tuple[str, ...], *, fix: bool = False, unsafe: bool = False,
                       diff: bool = False, max_size: int = DEFAULT_MAX_FILE_SIZE, project=None,
                       view: View = EVERYTHING) -> FileResult:
    """Lint (and with ``fix``/``diff`` fix) one notebook, like ``runner.lint_file`` does a
    Python file (``project``: the project index, when the runner builds one). Never raises for
    bad input."""
    result = FileResult(display)
    rules = rules_for(codes)
    context = (project, path if project is not None else None, view)
    with bad_input_reported(result):
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
            write_fixed(result, path, dump(doc, nb.indent), encoding,
                        relint=lambda: [_in_cell(nb, f) for f in lint_source(nb.python, display, rules, *context)])
    return result


def _cell_diff(nb: Notebook, doc: dict, i: int, display: str) -> str:
    old, new = cell_source(nb.doc["cells"][i]) + "\n", cell_source(doc["cells"][i]) + "\n"
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{display}:cell {i + 1}", tofile=f"b/{display}:cell {i + 1}"))
