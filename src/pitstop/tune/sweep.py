"""The batch-size sweep of API mode: samples/s per batch size, and the largest batch that fits.

For each batch size (doubling from the loader's, or the sizes given) and each variant
(plain, and each memory knob that recomputes, e.g. activation checkpointing, PIT401):

1. one untimed **memory probe** step measures the step's peak (see
   :mod:`pitstop.tune.peak`); an out-of-memory error is caught, and a peak whose
   ``(1 + margin)`` multiple exceeds the cap counts as "does not fit" without ever
   allocating it for real;
2. a batch that fits is **timed** (``warmup + steps`` optimizer steps): samples/s.

With ``effective_batch`` the effective batch stays fixed: a micro-batch ``b`` runs with
``accumulate = effective_batch // b`` (the accumulation knob, PIT406), and sizes that do
not divide it are skipped. The sweep stops at the first size where no variant fits.
Losses are not compared across batch sizes (a different batch is a different optimization).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pitstop.jsoncodec import OMIT_NONE
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.peak import MEASURE_CPU, MEASURE_CUDA, default_cap
from pitstop.tune.options import Budget, merge_recipe_fields

__all__ = ["batch_size_sweep", "DEFAULT_MEMORY_MARGIN", "SweepRow", "SweepPick", "SweepResult"]

DEFAULT_MEMORY_MARGIN = 0.10


@dataclass
class SweepRow:
    """One batch size and variant: its ``accumulate``, measured ``peak_memory``, whether it
    ``fits``, ``status`` (``ok``, ``skipped``, ``over_cap``, or how its run failed), speed, and
    ``recipe`` (the Recipe fields of its knobs; absent when it was not reached)."""

    batch_size: int
    variant: str
    accumulate: int = 1
    peak_memory: int | None = None
    fits: bool | None = None
    status: str = "skipped"
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    reason: str = ""
    knobs: list[dict[str, Any]] = field(default_factory=list)
    recipe: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class SweepPick:
    """The fastest row that fits (samples/s)."""

    batch_size: int
    variant: str
    accumulate: int
    samples_per_s: float | None
    recipe: dict[str, Any]


@dataclass(frozen=True)
class SweepResult:
    """The ``sweep`` section of the result: the memory ``cap`` and where it comes from, the
    rows, the largest batch that fits per variant, the fastest that fits."""

    cap: int | None
    cap_source: str
    margin: float
    effective_batch: int | None
    memory_measure: str
    rows: list[SweepRow]
    largest_fit: dict[str, int | None]
    recommended: SweepPick | None
    note: str


def _sizes(base: int, max_batch: int) -> list[int]:
    out, b = [], base
    while b <= max_batch:
        out.append(b)
        b *= 2
    return out


def batch_size_sweep(backend: Any, ctx: Context, knobs: Sequence[Knob], *, budget: Budget, steps: int, warmup: int,
                     timeout: float, batch_sizes: Sequence[int] | None = None, max_batch: int | None = None,
                     memory_cap: int | None = None, memory_margin: float = DEFAULT_MEMORY_MARGIN,
                     effective_batch: int | None = None, progress: Any = None) -> SweepResult:
    """Sweep the batch sizes (see the module docstring); the ``sweep`` section of the result."""
    base = ctx.batch_size or 1
    sizes = sorted(set(batch_sizes)) if batch_sizes else _sizes(base, max_batch or 8 * base)
    cap, cap_source = (memory_cap, "memory_cap option") if memory_cap is not None else default_cap(ctx.device)
    sweep = _Sweep(backend, ctx, knobs, budget=budget, steps=steps, warmup=warmup, timeout=timeout, cap=cap,
                   margin=memory_margin, effective_batch=effective_batch, progress=progress)
    variants = _variants(ctx, knobs)
    largest: dict[str, int | None] = {name: None for name, _ in variants}
    rows: list[SweepRow] = []
    if progress is not None:
        progress.total_add(len(sizes) * len(variants))
    for b in sizes:
        fits_any = False
        for vname, settings in variants:
            row = sweep.row(b, vname, settings)
            rows.append(row)
            if row.status == "ok":
                fits_any = True
                largest[vname] = b
        if not fits_any:
            break
    return _summary(rows, largest, ctx, cap=cap, cap_source=cap_source, margin=memory_margin,
                    effective_batch=effective_batch)


def _variants(ctx: Context, knobs: Sequence[Knob]) -> list[tuple[str, tuple[Setting, ...]]]:
    """``plain`` and one variant per value of each memory knob that recomputes and applies."""
    recompute = [k for k in knobs if k.memory_role == "recompute" and k.applies(ctx)]
    return [("plain", ()), *((k.label(v), (k.setting(v),)) for k in recompute for v in k.values(ctx))]


class _Sweep:
    """One row of the sweep at a time: accumulation, time budget, memory probe, timed run."""

    def __init__(self, backend: Any, ctx: Context, knobs: Sequence[Knob], *, budget: Budget, steps: int, warmup: int,
                 timeout: float, cap: int | None, margin: float, effective_batch: int | None, progress: Any) -> None:
        self.backend, self.ctx, self.knobs, self.budget = backend, ctx, knobs, budget
        self.steps, self.warmup, self.timeout = steps, warmup, timeout
        self.cap, self.margin, self.effective_batch, self.progress = cap, margin, effective_batch, progress
        self.accumulate = next((k for k in knobs if k.memory_role == "accumulate"), None)
        self.by_key = {(k.tip, k.name): k for k in knobs}
        self.estimate = 0.0  # the longest timed run so far: what the budget must still fit

    def row(self, b: int, vname: str, settings: tuple[Setting, ...]) -> SweepRow:
        row = SweepRow(batch_size=b, variant=vname, knobs=[s.to_dict() for s in settings])
        if self.progress is not None:
            self.progress.start(f"sweep batch {b} {vname}")
        self._measure(row, b, settings)
        if self.progress is not None:
            self.progress.advance()
        return row

    def _measure(self, row: SweepRow, b: int, settings: tuple[Setting, ...]) -> None:
        settings, acc = self._accumulation(row, b, settings)
        if acc is None:
            return
        row.accumulate = acc
        if not self.budget.fits(self.estimate):
            row.reason = "time budget spent"
            return
        fields, _ = merge_recipe_fields([self.by_key[(s.code, s.knob)].recipe_fields(s.value, self.ctx)
                                         for s in settings])
        row.recipe = fields
        if self._fits(row, b, settings):
            self._time(row, b, acc, settings)

    def _accumulation(self, row: SweepRow, b: int, settings: tuple[Setting, ...]
                      ) -> tuple[tuple[Setting, ...], int | None]:
        """With ``effective_batch``: the accumulation that keeps it (None: this size cannot)."""
        eb = self.effective_batch
        if not eb:
            return settings, 1
        if b > eb or eb % b:
            row.reason = f"effective batch {eb} is not a multiple of {b}"
            return settings, None
        acc = eb // b
        if acc > 1:
            if self.accumulate is None:
                row.reason = "no accumulation knob registered"
                return settings, None
            settings = settings + (self.accumulate.setting(acc),)
            row.knobs = [s.to_dict() for s in settings]
        return settings, acc

    def _fits(self, row: SweepRow, b: int, settings: tuple[Setting, ...]) -> bool:
        """One untimed memory probe step: does the batch fit under the cap (with the margin)?"""
        probe = self.backend.run(settings, self.knobs, memory_only=True, batch_size=b, timeout=self.timeout)
        if not probe.ok:
            row.fits, row.status = False, probe.status
            row.reason = "out of memory (caught)" if probe.status == "oom" else probe.message
            return False
        peak = row.peak_memory = probe.peak_memory
        if peak is not None and self.cap is not None and peak * (1 + self.margin) > self.cap:
            row.fits, row.status = False, "over_cap"
            row.reason = (f"peak x {1 + self.margin:g} = {peak * (1 + self.margin) / 2**20:.0f} MiB "
                          f"> cap {self.cap / 2**20:.0f} MiB")
            return False
        row.fits = True
        return True

    def _time(self, row: SweepRow, b: int, acc: int, settings: tuple[Setting, ...]) -> None:
        timed = self.backend.run(settings, self.knobs, batch_size=b, timeout=self.timeout, steps=self.steps,
                                 warmup=self.warmup)
        self.estimate = max(self.estimate, timed.elapsed)
        if not timed.ok:
            row.fits, row.status, row.reason = timed.status != "oom", timed.status, timed.message
            return
        sps = 1.0 / timed.median_step if timed.median_step else None
        row.status, row.steps_per_s = "ok", sps
        row.samples_per_s = sps * (timed.batch_size or b * acc) if sps else None
        row.reason = "" if row.peak_memory is not None else "peak not measurable here: fit assumed"


def _summary(rows: list[SweepRow], largest: dict[str, int | None], ctx: Context, *, cap: int | None,
             cap_source: str, margin: float, effective_batch: int | None) -> SweepResult:
    ok = [r for r in rows if r.status == "ok" and r.samples_per_s]
    best = max(ok, key=lambda r: r.samples_per_s) if ok else None
    return SweepResult(
        cap=cap, cap_source=cap_source, margin=margin, effective_batch=effective_batch,
        memory_measure=MEASURE_CUDA if ctx.device == "cuda" else MEASURE_CPU,
        rows=rows, largest_fit=largest,
        recommended=None if best is None else SweepPick(
            batch_size=best.batch_size, variant=best.variant, accumulate=best.accumulate,
            samples_per_s=best.samples_per_s, recipe=best.recipe or {}),
        note=("one timed run per row; losses are not compared across batch sizes (a different batch is a "
              "different optimization: scale the learning rate, or fix effective_batch=)"),
    )
