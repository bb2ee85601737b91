"""The layout rules of DEVELOPERS.md, checked on the source (torch-free, from the AST).

- the catalog sits below the mechanisms: only ``pitstop/catalog*.py`` and the tip modules
  import ``pitstop.tips``; nothing imports the old ``pitstop.registry``;
- mechanisms (lint, doctor, trace, tune, engine, bench) never import ``report/``: they return
  typed results, and the CLI (or ``pitstop/api.py``, ``integrations/``) picks the renderer;
- no module imports another module's private name (``from x import _name``);
- no import circle between modules (counting imports inside functions and under
  ``if TYPE_CHECKING:`` too: a circle of types is a circle of design);
- no module over 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "pitstop"
MECHANISMS = ("lint", "doctor", "trace", "tune", "engine", "bench")
MAX_LINES = 400
LINE_LIMIT_EXEMPT: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, typing: bool = False) -> list[tuple[str, str | None, int]]:
    """``(imported module or module.attr, imported name or None, line)`` of every import in a
    module, inside functions too, relative imports resolved."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue  # ``if TYPE_CHECKING:`` imports never run
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            out += [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, a.name, node.lineno)
                    for a in node.names]
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_of(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _where(name: str, line: int) -> str:
    return f"{MODULES[name].relative_to(SRC)}:{line}"


def test_only_the_catalog_imports_the_tip_modules():
    bad = []
    for name in MODULES:
        if name.startswith(("pitstop.tips", "pitstop.catalog")):
            continue
        for target, _, line in _imports(name):
            if target.startswith(("pitstop.tips", "pitstop.registry")):
                bad.append(f"{_where(name, line)} imports {target}")
    assert not bad, "mechanisms ask pitstop.catalog (implementations, get), never pitstop.tips:\n" + "\n".join(bad)


def test_mechanisms_never_import_report():
    bad = []
    for name in MODULES:
        if name.split(".")[1:2] and name.split(".")[1] in MECHANISMS:
            bad += [f"{_where(name, line)} imports {target}" for target, _, line in _imports(name)
                    if target == "pitstop.report" or target.startswith("pitstop.report.")]
    assert not bad, "a mechanism returns a typed result; report/ renders it:\n" + "\n".join(bad)


def test_no_private_name_is_imported_across_modules():
    bad = []
    for name in MODULES:
        for target, imported, line in _imports(name):
            mod = _module_of(target)
            if mod and mod != name and imported and imported.startswith("_") and not imported.startswith("__"):
                bad.append(f"{_where(name, line)} imports {imported} from {mod}")
    assert not bad, "\n".join(bad)


def test_no_import_circles():
    graph = {name: {m for t, _, _ in _imports(name, typing=True) if (m := _module_of(t)) and m != name
                    and not m.startswith(name + ".")}  # a package importing its own submodules is no circle
             for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, circles


def test_modules_stay_under_400_lines():
    long = []
    for path in MODULES.values():
        rel = path.relative_to(SRC).as_posix()
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and rel not in LINE_LIMIT_EXEMPT:
            long.append(f"{rel}: {n} lines")
    assert not long, "split by concern:\n" + "\n".join(long)


def test_every_name_in___all___is_defined():
    """A name listed in ``__all__`` exists in its module (packages that resolve names lazily
    through a module ``__getattr__`` excepted)."""
    bad = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined: set[str] = set()
        listed: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) \
                    and isinstance(node.value, (ast.List, ast.Tuple)):
                listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        if "__getattr__" in defined:
            continue
        bad += [f"{path.relative_to(SRC)}: {n}" for n in listed if n not in defined]
    assert not bad, "\n".join(bad)


def test_device_facts_are_read_in_one_place():
    """torch's CUDA device properties are read by pitstop.gpu.cuda_device only (issue 27: device
    facts were read in three places)."""
    readers = ("get_device_properties", "get_device_name", "get_device_capability")
    found = [f"{path.relative_to(SRC).as_posix()}: {name}" for mod, path in MODULES.items() if mod != "pitstop.gpu"
             for name in readers if f"cuda.{name}(" in path.read_text(encoding="utf-8")]
    assert not found, "read them through pitstop.gpu.cuda_device:\n" + "\n".join(found)


def test_no_folder_but_tips_holds_over_25_modules():
    """A reader finds a mechanism's files at a glance (issue 27: doctor/ had 38 in one folder)."""
    src = SRC / "pitstop"
    crowded = [f"{d.relative_to(src)}: {n}" for d in src.rglob("*") if d.is_dir() and d.name != "tips"
               for n in [len(list(d.glob("*.py")))] if n > 25]
    assert not crowded, crowded
