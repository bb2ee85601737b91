"""Script mode of the memory-budget search: an unmodified script, its DataLoader's batch swept.

A script's own loop cannot be made to accumulate micro-batches, so here the effective batch is
kept by the variants that change no batch (activation checkpointing of the model's repeated
blocks, bf16 autocast, both), each checked at the script's batch ``B``; when none of them fits,
the script's training DataLoader is given smaller batches (``B/2``, ``B/4``, ... through the
setup :class:`LoaderBatchKnob`) until one fits, reported as a change of the effective batch
(scale the learning rate, or accumulate ``B/b`` micro-batches in the script: PIT406).

Each combination's memory is one short run in the doctor's full mode: the profiled warmup step,
followed storage by storage (the CUDA allocator's peak where there is one); a combination that
fits with the margin is timed in light mode; the losses of those at ``B`` are checked against
the plain run at ``B`` (run for its losses even when it is over the budget, where the device has
room). Rows, choice and JSON are :class:`pitstop.tune.memfit.search.BudgetFit`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pitstop.tune.equivalence import check_losses
from pitstop.tune.knob import Knob, Setting
from pitstop.tune.memfit.search import DEFAULT_MARGIN, BudgetFit, BudgetRow, variants

__all__ = ["LoaderBatchKnob", "fit_budget_script", "tune_memory_script", "halvings"]


class LoaderBatchKnob(Knob, register=False):
    """The script's DataLoaders built with ``batch_size=value`` (a setup of the search, not a trick)."""

    name = "loader_batch"
    title = "DataLoader batch size"
    modes = ("script",)

    def label(self, value):
        return f"batch {value}"

    def recipe_fields(self, value, ctx):
        return {}

    def apply_in_child(self, value, **options):
        from torch.utils.data import DataLoader

        from pitstop.tune.patch import patch_init

        def change(arguments):
            if arguments.get("batch_sampler") is None and arguments.get("batch_size", 1) is not None:
                arguments["batch_size"] = int(value)

        patch_init(DataLoader, change)


def halvings(batch: int) -> list[int]:
    """``batch``, then halved down to 1."""
    out, b = [], batch
    while b >= 1:
        out.append(b)
        b //= 2
    return out


def _peak(result: Any) -> int | None:
    obs = result.observations
    prof = obs.memory_profile if obs is not None else None
    if prof is None:
        return result.peak_memory if result.device == "cuda" else None
    return prof.allocator_peak or prof.peak


def fit_budget_script(backend: Any, knobs: Sequence[Knob], *, budget: int, margin: float = DEFAULT_MARGIN,
                      steps: int = 5, warmup: int = 2, timeout: float = 300.0) -> BudgetFit:
    """The search on a :class:`pitstop.tune.script.ScriptBackend` whose survey ran (``backend.ctx``)."""
    ctx = backend.ctx
    batch = ctx.batch_size or 1
    sizer = LoaderBatchKnob()
    knobs = [*knobs, sizer]
    sizes = halvings(batch) if ctx.loader_workers is not None else [batch]
    rows: list[BudgetRow] = []
    timed: list[tuple[BudgetRow, Any, bool]] = []
    for label, base, reduced in variants(ctx, knobs):
        for size in sizes:
            settings: tuple[Setting, ...] = base + ((sizer.setting(size),) if size != batch else ())
            row = BudgetRow(variant=label, accumulate=1, micro_batch=size, knobs=[s.to_dict() for s in settings])
            rows.append(row)
            result = backend.profile(settings, knobs, timeout=timeout)
            if result.oom is not None or result.status not in ("stopped", "finished"):
                row.fits, row.status = False, "oom" if result.oom is not None else "error"
                row.reason = result.message
                continue
            row.peak = _peak(result)
            row.fits = row.peak is None or row.peak * (1 + margin) <= budget
            if not row.fits:
                row.status = "over_budget"
                row.reason = f"peak x {1 + margin:g} = {row.peak * (1 + margin) / 2**20:.1f} MiB > budget {budget / 2**20:.1f} MiB"
                continue
            run = backend.run(settings, knobs, timeout=timeout, steps=steps, warmup=warmup)
            if not run.ok:
                row.status, row.reason = run.status, run.message
                break
            row.status = "ok"
            row.samples_per_s = (run.batch_size or size) / run.median_step if run.median_step else None
            if size != batch:
                row.reason = (f"the effective batch changes from {batch} to {size}: scale the learning rate, or "
                              f"accumulate {batch // size} micro-batches in the script (PIT406)")
            timed.append((row, run, reduced))
            break
    ref = next((run for row, run, _ in timed if row.variant == "plain" and row.micro_batch == batch), None)
    if ref is None:
        ref = backend.run((), knobs, timeout=timeout, steps=steps, warmup=warmup)
        ref = ref if ref.ok else None
    for row, run, reduced in timed:
        if row.micro_batch != batch:
            row.loss = {"status": "unchecked", "message": "another batch is another optimization: losses not compared"}
        elif ref is not None:
            check = check_losses([ref.losses], [run.losses], reduced_precision=reduced)
            row.loss = check.to_dict()
            if not check.passed:
                row.status, row.reason = "diverged", check.message
    kept = [r for r, _, _ in timed if r.status == "ok" and r.samples_per_s and r.micro_batch == batch]
    smaller = [r for r, _, _ in timed if r.status == "ok" and r.samples_per_s and r.micro_batch != batch]
    chosen = max(kept, key=lambda r: r.samples_per_s) if kept else (
        max(smaller, key=lambda r: (r.micro_batch, r.samples_per_s)) if smaller else None)
    measure = "CUDA allocator peak of a profiled step" if ctx.device == "cuda" else \
        "tracked tensor storages of a profiled step (pitstop ledger)"
    return BudgetFit(budget=budget, margin=margin, effective_batch=batch, memory_measure=measure, rows=rows,
                     chosen=chosen, reference="plain, the script's batch" if ref is not None else "none",
                     note="script mode: the effective batch is kept by the variants at the script's batch; smaller "
                          "batches change it (the script's loop cannot be made to accumulate)")


def tune_memory_script(script: str | None = None, module: str | None = None, args: Sequence[str] = (), *,
                       budget: int | str, margin: float = DEFAULT_MARGIN, steps: int = 5, warmup: int = 2,
                       timeout: float = 300.0, seed: int = 0, cwd: str | None = None,
                       knobs: Sequence[Knob] | None = None, worker: Any = None) -> BudgetFit:
    """Script mode entry (``pitstop tune --memory-budget SIZE``): survey, then the search."""
    from pitstop.tune.knob import all_knobs
    from pitstop.tune.peak import parse_bytes
    from pitstop.tune.script import ScriptBackend

    backend = ScriptBackend(script=script, module=module, args=args, seed=seed, cwd=cwd, timeout=timeout,
                            worker=worker)
    try:
        backend.context()
        return fit_budget_script(backend, list(knobs) if knobs is not None else all_knobs(), budget=parse_bytes(budget),
                                 margin=margin, steps=steps, warmup=warmup, timeout=timeout)
    finally:
        backend.close()
