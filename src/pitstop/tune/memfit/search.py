"""Tune for a memory budget: the cheapest combination that fits and keeps the effective batch, loss checked.

Given a budget (bytes of device memory) and the effective batch ``B`` (the loader's batch unless
given), :func:`fit_budget` tries, for each *variant* (plain; each memory knob that recomputes,
e.g. activation checkpointing; each reduced-precision knob that applies, e.g. bf16 autocast;
recompute and precision together), the smallest accumulation ``k`` (a divisor of ``B``:
micro-batches of ``B / k``, the accumulation knob) whose step fits:

1. a **memory probe** (one untimed step, :mod:`pitstop.tune.peak`): the step's peak times
   ``1 + margin`` must stay under the budget; a real out-of-memory error is caught and counts as
   "does not fit";
2. each variant's fitting combination is **timed** (``warmup + steps`` optimizer steps):
   samples per second of the effective batch;
3. its **losses are checked** against the reference, the plain step at ``B`` (at the smallest
   ``k`` that runs when ``B`` itself cannot run here): the same training, within the
   equivalence floors of :mod:`pitstop.tune.equivalence` (reduced precision gets the wider one).

The cheapest is the fastest combination that fits and passes the loss check. The tuner never
names a tip: knobs are picked by ``memory_role`` and ``reduced_precision``.
Script mode (the batch of an unmodified script's DataLoader) is :mod:`pitstop.tune.memfit.script`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pitstop.tune.equivalence import check_losses
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.options import merge_recipe_fields

__all__ = ["BudgetRow", "BudgetFit", "fit_budget", "tune_memory", "variants", "accumulations", "DEFAULT_MARGIN",
           "MAX_ACCUMULATE"]

DEFAULT_MARGIN = 0.10
MAX_ACCUMULATE = 16


@dataclass
class BudgetRow:
    """One combination: ``variant`` (its knobs' labels), ``accumulate`` micro-batches of
    ``micro_batch``; its measured ``peak``, whether it ``fits``, ``status`` (``ok``, ``over_budget``,
    ``oom``, ``skipped`` or how its run failed), speed, the loss check against the reference
    (``loss``: status, deviation, tolerance, message) and its Recipe fields (API mode)."""

    variant: str
    accumulate: int
    micro_batch: int
    knobs: list[dict[str, Any]] = field(default_factory=list)
    peak: int | None = None
    fits: bool | None = None
    status: str = "skipped"
    samples_per_s: float | None = None
    reason: str = ""
    loss: dict[str, Any] | None = None
    recipe: dict[str, Any] | None = None


@dataclass(frozen=True)
class BudgetFit:
    """The search's answer: the ``budget`` and ``margin``, the ``effective_batch`` kept, how
    memory was measured, every row, the ``chosen`` one (None: nothing fits and passes) and the
    ``reference`` the losses were checked against."""

    budget: int
    margin: float
    effective_batch: int
    memory_measure: str
    rows: list[BudgetRow]
    chosen: BudgetRow | None
    reference: str
    note: str = ""


def accumulations(batch: int, most: int = MAX_ACCUMULATE) -> list[int]:
    """The accumulation steps that split ``batch`` into equal micro-batches (1 first)."""
    return [k for k in range(1, min(batch, most) + 1) if batch % k == 0]


def variants(ctx: Context, knobs: Sequence[Knob]) -> list[tuple[str, tuple[Setting, ...], bool]]:
    """(label, settings, reduced precision) of each variant: plain, each recompute knob, each
    reduced-precision knob that applies (its first value), and recompute with precision."""
    recompute = [(k.label(v), k.setting(v)) for k in knobs if k.memory_role == "recompute" and k.applies(ctx)
                 for v in k.values(ctx)[:1]]
    precision = [(k.label(v), k.setting(v)) for k in knobs if k.reduced_precision and k.applies(ctx)
                 and k.memory_role is None for v in k.values(ctx)[:1]]
    out = [("plain", (), False)]
    out += [(label, (s,), False) for label, s in recompute]
    out += [(label, (s,), True) for label, s in precision]
    out += [(f"{a} + {b}", (s, t), True) for a, s in recompute for b, t in precision]
    return out


class _Search:
    def __init__(self, backend: Any, ctx: Context, knobs: Sequence[Knob], *, budget: int, margin: float,
                 steps: int, warmup: int, timeout: float, progress: Any) -> None:
        self.backend, self.ctx, self.knobs = backend, ctx, list(knobs)
        self.budget, self.margin, self.steps, self.warmup, self.timeout = budget, margin, steps, warmup, timeout
        self.progress = progress
        self.accumulate = next((k for k in knobs if k.memory_role == "accumulate"), None)
        self.by_key = {(k.tip, k.name): k for k in knobs}

    def settings(self, base: tuple[Setting, ...], k: int) -> tuple[Setting, ...] | None:
        if k == 1:
            return base
        return None if self.accumulate is None else base + (self.accumulate.setting(k),)

    def row(self, label: str, base: tuple[Setting, ...], k: int, batch: int) -> BudgetRow:
        settings = self.settings(base, k)
        row = BudgetRow(variant=label, accumulate=k, micro_batch=batch // k)
        if settings is None:
            row.reason = "no accumulation knob registered"
            return row
        row.knobs = [s.to_dict() for s in settings]
        fields, _ = merge_recipe_fields([self.by_key[(s.code, s.knob)].recipe_fields(s.value, self.ctx)
                                         for s in settings])
        row.recipe = fields
        if self.progress is not None:
            self.progress.start(f"memory budget: {label}, {k} x {batch // k}")
        probe = self.backend.run(settings, self.knobs, memory_only=True, batch_size=batch // k, timeout=self.timeout)
        if not probe.ok:
            row.fits, row.status = False, probe.status
            row.reason = "out of memory (caught)" if probe.status == "oom" else probe.message
            return row
        row.peak = probe.peak_memory
        row.fits = row.peak is None or row.peak * (1 + self.margin) <= self.budget
        row.status = "fits" if row.fits else "over_budget"
        if not row.fits:
            row.reason = (f"peak x {1 + self.margin:g} = {row.peak * (1 + self.margin) / 2**20:.1f} MiB > budget "
                          f"{self.budget / 2**20:.1f} MiB")
        return row

    def time(self, row: BudgetRow, base: tuple[Setting, ...], batch: int) -> Any:
        run = self.backend.run(self.settings(base, row.accumulate), self.knobs, batch_size=batch // row.accumulate,
                               timeout=self.timeout, steps=self.steps, warmup=self.warmup)
        if not run.ok:
            row.status, row.reason = run.status, run.message
            return None
        sps = 1.0 / run.median_step if run.median_step else None
        row.status = "ok"
        row.samples_per_s = sps * (run.batch_size or batch) if sps else None
        return run


def fit_budget(backend: Any, ctx: Context, knobs: Sequence[Knob], *, budget: int, effective_batch: int | None = None,
               margin: float = DEFAULT_MARGIN, steps: int = 5, warmup: int = 2, timeout: float = 300.0,
               progress: Any = None, memory_measure: str = "") -> BudgetFit:
    """The memory-budget search (see the module docstring); ``backend`` runs a combination
    (``run(settings, knobs, memory_only=, batch_size=, ...)``, :class:`pitstop.tune.inprocess.ApiBackend`)."""
    batch = effective_batch or ctx.batch_size or 1
    search = _Search(backend, ctx, knobs, budget=budget, margin=margin, steps=steps, warmup=warmup, timeout=timeout,
                     progress=progress)
    rows: list[BudgetRow] = []
    timed: list[tuple[BudgetRow, Any, bool]] = []
    for label, base, reduced in variants(ctx, knobs):
        for k in accumulations(batch):
            row = search.row(label, base, k, batch)
            rows.append(row)
            if row.fits:
                run = search.time(row, base, batch)
                if run is not None:
                    timed.append((row, run, reduced))
                break
    reference, ref_label = _reference(search, timed, batch)
    for row, run, reduced in timed:
        if reference is None:
            row.loss = {"status": "unchecked", "message": "no reference run: the plain step ran at no accumulation"}
            continue
        check = check_losses([reference.losses], [run.losses], reduced_precision=reduced)
        row.loss = check.to_dict()
        if not check.passed:
            row.status, row.reason = "diverged", check.message
    passing = [r for r, _, _ in timed if r.status == "ok" and r.samples_per_s]
    chosen = max(passing, key=lambda r: r.samples_per_s) if passing else None
    return BudgetFit(budget=budget, margin=margin, effective_batch=batch, memory_measure=memory_measure, rows=rows,
                     chosen=chosen, reference=ref_label,
                     note="every combination keeps the effective batch; the cheapest is the fastest that fits and "
                          "trains the same (losses within the equivalence floor of the reference)")


def _reference(search: _Search, timed: list, batch: int) -> tuple[Any, str]:
    """The losses the others are checked against: the plain step at the whole batch when it
    runs here (memory budgets are checked, not enforced, where the device has room), else the
    plain combination with the fewest micro-batches that ran."""
    for row, run, _ in timed:
        if row.variant == "plain" and row.accumulate == 1:
            return run, "plain, the whole batch"
    run = search.backend.run((), search.knobs, batch_size=batch, timeout=search.timeout, steps=search.steps,
                             warmup=search.warmup)
    if run.ok:
        return run, "plain, the whole batch (run over the budget, for its losses)"
    for row, run, _ in timed:
        if row.variant == "plain":
            return run, f"plain, {row.accumulate} micro-batches of {row.micro_batch}"
    return None, "none"


def tune_memory(model: Any, optimizer_factory: Any, loss_fn: Any, loader: Any, *, budget: int | str,
                effective_batch: int | None = None, margin: float = DEFAULT_MARGIN, steps: int = 5, warmup: int = 2,
                timeout: float = 300.0, seed: int = 0, recipe: Any = None, knobs: Sequence[Knob] | None = None) -> BudgetFit:
    """API mode: the memory-budget search on an engine training (:func:`fit_budget` with
    :class:`pitstop.tune.inprocess.ApiBackend`); ``budget`` in bytes or ``"12GiB"``. On CPU the
    peak is one step followed by PyTorch's ``MemTracker`` and the budget is checked, not enforced."""
    from pitstop.tune.inprocess import ApiBackend
    from pitstop.tune.knob import all_knobs
    from pitstop.tune.peak import MEASURE_CPU, MEASURE_CUDA, parse_bytes

    backend = ApiBackend(model, optimizer_factory, loss_fn, loader, recipe=recipe, seed=seed)
    ctx = backend.context()
    return fit_budget(backend, ctx, list(knobs) if knobs is not None else all_knobs(), budget=parse_bytes(budget),
                      effective_batch=effective_batch, margin=margin, steps=steps, warmup=warmup, timeout=timeout,
                      memory_measure=MEASURE_CUDA if ctx.device == "cuda" else MEASURE_CPU)
