"""Where a few nodes of a libcst module lie in its source: the spans of the findings and their fixes.

libcst's ``PositionProvider`` regenerates the module's code and records a line/column range for
every node, tracking the line and column token by token: on the lint corpus (803 files, 7.5 MB)
that took 33 CPU-s against 3.6 for the plain code generation (AMD EPYC, libcst 1.9.0). A lint run
needs the ranges of a handful of nodes per file (each finding's node and the nodes its fix
edits), so :func:`spans` runs the plain code generation and counts characters only when one of
those nodes opens or closes. It keeps ``PositionProvider``'s rules, so a span is the same range:
the syntactic range where the node records one (its own parentheses and leading lines left
out, a compound statement ending where its body ends), else everything the node generated.

The code generation's state class is libcst's own (``libcst._nodes.internal.CodegenState``: not
exported). Where a libcst release moves it, :func:`spans` falls back to ``PositionProvider``
(``FAST`` says which one runs); ``tests/test_lint_spans.py`` compares the two on every node of
real and generated files.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
import re

import libcst as cst

__all__ = ["Span", "spans", "FAST"]

try:  # libcst's codegen state: the base of its position providers' own states
    from libcst._nodes.internal import CodegenState as _Codegen
except ImportError:  # pragma: no cover - a libcst that moved it: PositionProvider below
    _Codegen = None

#: True where the lean code generation runs (libcst's state class found), False: PositionProvider
FAST = _Codegen is not None
_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's own line ends (and the provider's)


class Span:
    """A node's source range: 1-based ``line`` and 0-based ``column`` at each end
    (``PositionProvider``'s convention, and its numbers)."""

    __slots__ = ("line", "column", "end_line", "end_column")

    def __init__(self, line: int, column: int, end_line: int, end_column: int) -> None:
        self.line, self.column, self.end_line, self.end_column = line, column, end_line, end_column

    @classmethod
    def of_offsets(cls, start: int, end: int, starts: list[int]) -> Span:
        """The span of characters ``start:end`` of a text whose lines begin at ``starts``."""
        line, end_line = bisect_right(starts, start), bisect_right(starts, end)
        return cls(line, start - starts[line - 1], end_line, end - starts[end_line - 1])


if _Codegen is not None:
    class _Spans(_Codegen):
        """Code generation that counts characters only at the wanted nodes' edges."""

        def __init__(self, module: cst.Module, wanted: set[int]) -> None:
            super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
            self.wanted = wanted
            self.found: dict[int, tuple[int, int]] = {}
            self.opened: list[int] = []
            self.counted = 0  # tokens counted into ``chars``
            self.chars = 0
            self.popped = ""

        def offset(self) -> int:
            tokens = self.tokens
            if self.counted < len(tokens):
                self.chars += sum(map(len, tokens[self.counted:]))
                self.counted = len(tokens)
            return self.chars

        def pop_trailing_newline(self) -> None:
            # a file without a final newline: libcst generates one and drops it; the provider's
            # line and column do not go back, and neither does the count
            self.offset()
            self.popped = self.tokens[-1] if self.tokens else ""
            self.counted -= 1 if self.tokens else 0
            super().pop_trailing_newline()

        def before_codegen(self, node: cst.CSTNode) -> None:
            if id(node) in self.wanted:
                self.opened.append(self.offset())

        def after_codegen(self, node: cst.CSTNode) -> None:
            if id(node) in self.wanted:
                start = self.opened.pop()
                self.found.setdefault(id(node), (start, self.offset()))  # a syntactic range stays

        @contextmanager
        def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                      end_node: cst.CSTNode | None = None) -> Iterator[None]:
            if id(node) not in self.wanted:
                yield
                return
            for inner in (start_node, end_node):  # hoisted from children generated inside
                if inner is not None:
                    self.wanted.add(id(inner))
            start = self.offset()
            try:
                yield
            finally:
                end = self.offset()
                if start_node is not None:
                    start = self.found[id(start_node)][0]
                if end_node is not None:
                    end = self.found[id(end_node)][1]
                self.found[id(node)] = (start, end)


def spans(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[int, Span]:
    """The :class:`Span` of each of ``nodes`` found in ``module``, by ``id(node)`` (a node not in the
    module has none). Lines and columns are those of the module's generated code, as the provider's
    are: the source itself wherever libcst gives it back unchanged (all but whitespace-only last
    lines without a final newline, which it drops)."""
    nodes = list(nodes)
    if _Codegen is None:  # see FAST
        return _by_provider(module, nodes)
    state = _Spans(module, {id(n) for n in nodes})
    module._codegen(state)
    if not state.found:
        return {}
    text = "".join(state.tokens) + state.popped
    starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    asked = {id(n) for n in nodes}
    return {k: Span.of_offsets(a, b, starts) for k, (a, b) in state.found.items() if k in asked}


def _by_provider(module: cst.Module, nodes: list[cst.CSTNode]) -> dict[int, Span]:
    from libcst.metadata import MetadataWrapper, PositionProvider

    ranges = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = {}
    for n in nodes:
        r = ranges.get(n)
        if r is not None:
            out[id(n)] = Span(r.start.line, r.start.column, r.end.line, r.end.column)
    return out
