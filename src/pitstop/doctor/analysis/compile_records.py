"""What the doctor saw of ``torch.compile`` (torch-free records, child -> parent as JSON).

Gathered in the child by :class:`pitstop.doctor.record.compile_watch.CompileWatch` from dynamo's own
reports (see ``docs/compile.md`` for which torch interface gives which field on which
version); read by the PIT601/PIT608/PIT609 checks and the reports' compile section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GraphBreak", "Recompile", "LimitHit", "CompileRecord"]


@dataclass(frozen=True)
class GraphBreak:
    """One graph break the user's code causes (the same reason at the same line counted once
    per compiled frame that reported it)."""

    #: dynamo's reason, first line (e.g. "Unsupported Tensor.item() call with capture_scalar_outputs=False").
    reason: str
    #: the user's ``file:line`` (innermost frame outside torch and pitstop), None when dynamo did not say.
    where: str | None = None
    #: the user's function holding that line (e.g. ``forward``).
    function: str | None = None
    #: the source line, as dynamo printed it.
    source: str | None = None
    #: times dynamo reported it (once per compilation of the frame that holds it).
    reports: int = 1
    #: the step kind (doctor plan: ``warmup``, ``observed`` ...) when it was first reported.
    step_kind: str | None = None


@dataclass(frozen=True)
class Recompile:
    """Recompilations of one function for one kind of guard failure."""

    #: the compiled function (``forward``), and its ``file:line`` (first line of its code).
    function: str
    where: str | None
    #: the failing guard without its values: "tensor 'ids' size mismatch at index 1".
    guard: str
    #: the last failure in full: "tensor 'ids' size mismatch at index 1. expected 8, actual 9".
    example: str
    #: recompilations with this guard failing.
    count: int = 1


@dataclass(frozen=True)
class LimitHit:
    """Dynamo gave up recompiling a function (``recompile_limit``, ``cache_size_limit`` before
    torch 2.6): from then on that function runs eagerly, uncompiled."""

    function: str
    where: str | None
    #: the config name and its value ("recompile_limit", 8).
    limit_name: str = "recompile_limit"
    limit: int | None = None
    last_reason: str | None = None


@dataclass(frozen=True)
class CompileRecord:
    #: any torch.compile'd model trained, or the script compiled anything.
    compiled: bool = False
    #: user graph breaks (``len(breaks)`` when the logs were read; dynamo's counter otherwise).
    graph_breaks: int | None = None
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    limit_hits: list[LimitHit] = field(default_factory=list)
    #: compilations (dynamo frames and lazy backward graphs) and their wall time, all of the run
    #: and inside the observed steps.
    compilations: int = 0
    compile_s: float = 0.0
    compile_s_observed: float = 0.0
    #: graphs dynamo produced (``counters["stats"]["unique_graphs"]``), None when unknown.
    graphs: int | None = None
    #: forwards of compiled models the doctor saw at their boundary (each runs through the breaks
    #: on its code path).
    calls: int = 0
    #: a compile call of the script passed ``dynamic=False`` (sizes never become symbolic).
    static: bool = False
    #: how the events were collected ("torch._logging artifacts ...", "dynamo counters only").
    source: str = ""
    #: compiled graph runs that reached the step's backward (``CompiledFunctionBackward`` nodes,
    #: ``doctor/record/graph_calls.py``), mean per observed step; None when not counted.
    calls_per_step: float | None = None
    #: CUDA graph replays (``torch.cuda.CUDAGraph.replay``) per observed step; None off CUDA.
    replays_per_step: float | None = None
    #: the same side by side: the observed steps each followed by a bare step (the doctor's hooks
    #: on) and those bare steps (hooks off), pairs in which nothing compiled; None: no such pair.
    paired_calls_per_step: float | None = None
    bare_calls_per_step: float | None = None
    paired_replays_per_step: float | None = None
    bare_replays_per_step: float | None = None

    @property
    def recompile_count(self) -> int:
        return sum(r.count for r in self.recompiles)
