"""Where a tip lives in the code: ``pitstop explain CODE --where`` (torch-free).

For one tip: its module (the :class:`~pitstop.catalog.Tip` subclass), every registered face
class (lint rule, doctor check or probe, knob, benchmark) with the mechanism base it
derives from, its ``engine`` note and the engine modules that name its code, and the
definitions of its public ``helpers``, and its tests in a source checkout (face ``"test"``:
the lint fixtures folder ``tests/fixtures/lint/PITNNN/``, every test function or module-level
table such as ``CASES`` / ``EXPECTED`` that names the code, other fixture files that name it).
Everything is found from the loaded classes and the source files (``inspect`` and ``ast``);
nothing torch-backed is imported, so this works wherever ``pitstop lint`` does.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from pitstop.catalog import FACES, implementations

__all__ = ["Location", "locate"]

_ROOT = Path(__file__).resolve().parent  # src/pitstop
_CHECKOUT = _ROOT.parents[1]  # the repository, when running from a source checkout


@dataclass(frozen=True)
class Location:
    """One place in the code: ``face`` is a face letter or ``"tip"`` for the tip module."""

    face: str  # a face letter, "tip" (the tip module) or "test"
    name: str  # what is there: a class name, ``Tip.engine``, ``pitstop.freeze``, ``mentions PIT703``
    kind: str  # the mechanism base class (``Check``, ``Probe``, ``LintRule`` ...), or a word
    file: str  # absolute path
    line: int

    def to_dict(self) -> dict[str, object]:
        return {"face": self.face, "name": self.name, "kind": self.kind, "file": self.file, "line": self.line}


def locate(tip) -> list[Location]:
    """Every place of ``tip`` (a :class:`~pitstop.catalog.Tip` subclass), in face order."""
    out = [Location("tip", tip.__name__, "Tip", inspect.getsourcefile(tip), inspect.getsourcelines(tip)[1])]
    for face in FACES:
        for cls in sorted(implementations(face, tip.code), key=lambda c: inspect.getsourcelines(c)[1]):
            out.append(Location(face, cls.__name__, _mechanism(cls), inspect.getsourcefile(cls),
                                inspect.getsourcelines(cls)[1]))
        if face == "E" and tip.engine:
            out.append(Location("E", f"{tip.__name__}.engine", "note", inspect.getsourcefile(tip), _attr_line(tip, "engine")))
            out += [Location("E", f"mentions {tip.code}", "engine", str(path), n) for path, n in _mentions(tip.code, "engine")]
        if face == "H":
            for name in tip.helpers:
                found = _definition("pitstop.helpers", name)
                if found:
                    out.append(Location("H", f"pitstop.{name}", "helper", *found))
    return out + tests_of(tip.code)


def tests_of(code: str, root: Path | None = None) -> list[Location]:
    """The tests of tip ``code`` in the checkout at ``root`` (none outside a source checkout):
    its lint fixtures folder, the test functions and module-level tables of ``tests/*.py``
    that name it (``PIT101`` or ``pit101_``), and other fixture files that name it."""
    root = root or _CHECKOUT
    tests = root / "tests"
    if not (root / "pyproject.toml").is_file() or not tests.is_dir():
        return []
    named = re.compile(rf"\b{code}\b|\b{code.lower()}_")
    out = []
    fixtures = tests / "fixtures" / "lint" / code
    if fixtures.is_dir():
        first = fixtures / "bad.py" if (fixtures / "bad.py").is_file() else fixtures
        out.append(Location("test", f"tests/fixtures/lint/{code}/", "lint fixtures", str(first), 1))
    for path in sorted(tests.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not named.search(text):
            continue
        lines = text.splitlines()
        body = ast.parse(text).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the module docstring is prose, not a test
        for node in body:
            hit = next((n for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                        if named.search(lines[n - 1])), None)
            if hit is not None:
                out.append(Location("test", f"{path.name}::{_statement_name(node)}", "test", str(path), hit))
    for path in sorted((tests / "fixtures").rglob("*.py")):
        if fixtures.parent in path.parents:
            continue
        hit = next((n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                    if named.search(line)), None)
        if hit is not None:
            out.append(Location("test", str(path.relative_to(root)), "fixture", str(path), hit))
    return out


def _statement_name(node: ast.stmt) -> str:
    """``test_x`` for a function or class, ``CASES`` for an assignment, else the statement kind."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    names = [t.id for t in targets if isinstance(t, ast.Name)]
    return ", ".join(names) or type(node).__name__.lower()


def _mechanism(cls: type) -> str:
    """The abstract base a face class derives from: the nearest base with no tip code."""
    return next((b.__name__ for b in cls.__mro__[1:] if b.__dict__.get("tip", None) == ""), "Face")


def _attr_line(cls: type, attr: str) -> int:
    """Line of ``attr = ...`` in the body of class ``cls`` (its first line when not found)."""
    lines, first = inspect.getsourcelines(cls)
    node = ast.parse(textwrap.dedent("".join(lines)))
    for stmt in node.body[0].body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
            return first + stmt.lineno - 1
    return first


def _mentions(code: str, package: str) -> list[tuple[Path, int]]:
    """Lines of ``src/pitstop/<package>/*.py`` that name ``code`` (comments and docstrings)."""
    hits = []
    for path in sorted((_ROOT / package).glob("*.py")):
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if code in text:
                hits.append((path, n))
    return hits


def _definition(module: str, name: str, depth: int = 0) -> tuple[str, int] | None:
    """``(file, line)`` of the ``def``/``class`` of ``name`` reachable from ``module``,
    following ``from X import name`` without importing anything."""
    parts = module.split(".")
    if parts[0] != "pitstop" or depth > 4:
        return None
    base = _ROOT.joinpath(*parts[1:])  # by path: importing pitstop.helpers would import torch
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return str(path), node.lineno
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name and not a.asname for a in node.names):
            return _definition(node.module, name, depth + 1)
    return None
