"""What the compiled program ran each step: compiled graph runs and CUDA graph replays.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`, armed when the script
compiles (:class:`~pitstop.doctor.record.compile_watch.CompileWatch`'s ``on_arm``); a script that
compiles nothing pays nothing. Per step it counts:

- **compiled calls**: runs of a compiled (AOTAutograd) graph whose outputs reached the step's
  backward. Each such run puts one ``CompiledFunctionBackward`` node into the autograd graph;
  the node is found by walking the graph of each tensor handed to ``torch.autograd.backward``
  once the step has ended (outside the step's time; nodes stay readable after the backward).
  A compiled function that runs eagerly puts none there; a graph break adds one per graph.
  Compiled calls without gradients (evaluation) are not counted.
- **graph replays**: calls of ``torch.cuda.CUDAGraph.replay`` (``mode="reduce-overhead"``'s CUDA
  graph trees replay their graphs through it; counting adds a Python call to each replay).

The counts are kept per step kind: the observed steps (hooks on) against the bare ones (hooks
off, same process) tell whether the doctor's own instrumentation changed the program.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

__all__ = ["GraphCalls", "compiled_nodes", "autograd_nodes", "COMPILED_NODE"]

#: the autograd node a training run of an AOTAutograd-compiled graph leaves in the graph
COMPILED_NODE = "CompiledFunctionBackward"


def autograd_nodes(roots: list[Any], limit: int = 100_000) -> Iterator[Any]:
    """Each autograd node reachable from the nodes ``roots``, once (at most ``limit`` of them)."""
    seen: set[int] = set()
    keep = []  # node wrappers stay alive during the walk, so that their ids stay unique
    stack = list(roots)
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        yield node
        try:
            stack.extend(n for n, _ in node.next_functions)
        except Exception:
            continue


def _name(node: Any) -> str | None:
    try:
        return node.name()
    except Exception:
        return None


def compiled_nodes(roots: list[Any], limit: int = 100_000) -> int:
    """``CompiledFunctionBackward`` nodes reachable from the autograd nodes ``roots``."""
    return sum(1 for node in autograd_nodes(roots, limit) if _name(node) == COMPILED_NODE)


class GraphCalls:
    """See the module docstring. ``calls`` / ``replays``: step kind -> counts, one per step;
    ``steps``: ``(kind, calls, replays, compiled)`` per step in order (``compiled``: dynamo or a
    lazy backward compiled during the step: its counts say nothing of the steady program)."""

    def __init__(self, patches: Any, *, cuda: bool) -> None:
        self.patches, self.cuda = patches, cuda
        self.armed = False
        self.calls: dict[str, list[int]] = defaultdict(list)
        self.replays: dict[str, list[int]] = defaultdict(list)
        self.steps: list[tuple[str, int, int | None, bool]] = []
        self._roots: list[Any] = []
        self._replays = 0
        self.replay_counted = False  # torch.cuda.CUDAGraph.replay is counted

    def arm(self) -> None:
        """The script compiles: count from now on."""
        if self.armed:
            return
        self.armed = True
        if not self.cuda:
            return
        try:
            import torch

            graph_cls = torch.cuda.CUDAGraph
            original = graph_cls.replay
        except (ImportError, AttributeError):
            return
        calls = self

        def replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
            calls._replays += 1
            return original(graph, *args, **kwargs)

        self.patches.set(graph_cls, "replay", replay)
        self.replay_counted = True

    def watch(self, t: Any) -> None:
        """A tensor handed to ``torch.autograd.backward`` in the step in progress."""
        if self.armed:
            fn = getattr(t, "grad_fn", None)
            if fn is not None:
                self._roots.append(fn)

    def end_step(self, kind: str, compiled: bool = False) -> None:
        """The step of ``kind`` ended (``compiled``: something compiled during it): count its
        compiled calls and replays (bookkeeping time)."""
        if not self.armed:
            return
        roots, self._roots = self._roots, []
        n = compiled_nodes(roots)
        self.calls[kind].append(n)
        replays = self._replays if self.replay_counted else None
        if replays is not None:
            self.replays[kind].append(replays)
        self.steps.append((kind, n, replays, compiled))
        self._replays = 0

    def paired(self) -> tuple[float | None, float | None, float | None, float | None]:
        """Mean (calls, replays) of the observed steps each followed by a bare step, and of those
        bare steps, over the pairs in which nothing compiled: the same program with the doctor's
        hooks on and off, side by side. Nones: no such pair."""
        pairs = [(a, b) for a, b in zip(self.steps, self.steps[1:])
                 if a[0] == "observed" and b[0] == "bare" and not (a[3] or b[3])]
        if not pairs:
            return None, None, None, None

        def mean(values: list[int | None]) -> float | None:
            known = [v for v in values if v is not None]
            return sum(known) / len(known) if known else None

        return (mean([a[1] for a, _ in pairs]), mean([a[2] for a, _ in pairs]),
                mean([b[1] for _, b in pairs]), mean([b[2] for _, b in pairs]))

    def per_step(self, kind: str) -> tuple[float | None, float | None]:
        """Mean compiled calls and replays per step of ``kind`` (None: not counted)."""
        calls, replays = self.calls.get(kind), self.replays.get(kind)
        return (sum(calls) / len(calls) if calls else None, sum(replays) / len(replays) if replays else None)
