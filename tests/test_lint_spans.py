"""pitstop.lint.spans gives every node the range libcst's PositionProvider gives it.

The lint positions its findings and fixes with :func:`pitstop.lint.spans.spans` (code generation
that counts characters only at the wanted nodes) instead of ``PositionProvider`` (which tracks
line and column at every token). Here both run over every node of real files (pitstop's own
sources and the test fixtures: code of many shapes, none written for this test) and of the
shapes where they could part (CRLF line ends, a file without a final newline, whitespace-only
last lines libcst does not give back, nodes asked for alone: a compound statement's range is
hoisted from a child nobody else asked for). The grammar-generated files of hypothesmith found
the last two (25 examples, 54 s: not kept in the suite); the lint corpus tests check the
findings' lines and columns on 803 real files against their labels.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from conftest import FIXTURES, ROOT
from pitstop.lint.spans import FAST, spans

def _all_nodes(module: cst.Module) -> list[cst.CSTNode]:
    out, todo = [], [module]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(n.children)
    return out


def _expected(module: cst.Module) -> dict[int, tuple[int, int, int, int]]:
    ranges = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {id(n): (r.start.line, r.start.column, r.end.line, r.end.column) for n, r in ranges.items()}


def _mismatches(source: str, nodes_of=None) -> list[str]:
    module = cst.parse_module(source)
    nodes = _all_nodes(module) if nodes_of is None else nodes_of(module)
    want = _expected(module)
    got = spans(module, nodes)
    bad = []
    for n in nodes:
        s = got.get(id(n))
        have = None if s is None else (s.line, s.column, s.end_line, s.end_column)
        if have != want.get(id(n)):
            bad.append(f"{type(n).__name__} {module.code_for_node(n)[:40]!r}: {have} != {want.get(id(n))}")
    return bad


def _real_files() -> list:
    files = sorted((ROOT / "src" / "pitstop").rglob("*.py"))[::7] + sorted(FIXTURES.rglob("*.py"))[::5]
    return [f for f in files if f.stat().st_size < 40_000]


def test_the_lean_code_generation_runs_with_this_libcst():
    assert FAST, "libcst moved its CodegenState: pitstop.lint.spans fell back to PositionProvider (slower)"


@pytest.mark.parametrize("path", _real_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_node_of_a_real_file_gets_the_provider_s_range(path):
    source = path.read_text(encoding="utf-8")
    assert _mismatches(source) == []


def test_line_ends_a_missing_final_newline_and_nodes_asked_alone():
    source = ("import torch\r\n\r\n# a comment\r\n@decorator\r\ndef f(x):\r\n    if (x.item()) > 1:  # sync\r\n"
              "        return (x)\r\n    for i in range(3):\r\n        pass\r\n    else:\r\n        x = 1; y = 2\r\n"
              "    return [a for a in (x,)]")
    assert _mismatches(source) == [], source
    # without a final newline libcst generates one and drops it at the end; the provider's line and
    # column do not go back, so the module ends on line 13 of a 12-line file, here as there
    module = cst.parse_module(source)
    (whole,) = spans(module, [module]).values()
    assert (whole.end_line, whole.end_column) == (13, 0)
    # each node alone: a compound statement hoists its end from its body, which nobody else asked for
    want = _expected(module)
    for node in _all_nodes(module):
        got = spans(module, [node])[id(node)]
        assert (got.line, got.column, got.end_line, got.end_column) == want[id(node)], type(node).__name__
    # whitespace-only last lines without a final newline: libcst gives back other code, and both
    # number the lines of the code it gives back
    assert cst.parse_module("import x\n\n ").code != "import x\n\n "
    assert _mismatches("import x\n\n ") == [] and _mismatches("import x;#c\r\n\t \t\r\n \r\n ") == []


def test_a_node_outside_the_module_has_no_span():
    module = cst.parse_module("x = 1\n")
    assert spans(module, [cst.Name("y")]) == {}


def test_the_fallback_for_a_libcst_without_its_codegen_state_gives_the_same_spans(monkeypatch):
    import pitstop.lint.spans as spans_module

    source = (ROOT / "src" / "pitstop" / "lint" / "runner.py").read_text(encoding="utf-8")
    module = cst.parse_module(source)
    nodes = _all_nodes(module)[::5]
    fast = {k: (s.line, s.column, s.end_line, s.end_column) for k, s in spans(module, nodes).items()}
    monkeypatch.setattr(spans_module, "_Codegen", None)
    slow = {k: (s.line, s.column, s.end_line, s.end_column) for k, s in spans(module, nodes).items()}
    assert slow == fast and len(fast) == len(nodes)
