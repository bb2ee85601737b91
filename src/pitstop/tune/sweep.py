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
from typing import Any

from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.peak import MEASURE_CPU, MEASURE_CUDA, default_cap
from pitstop.tune.options import Budget, merge_recipe_fields

__all__ = ["batch_size_sweep", "DEFAULT_MEMORY_MARGIN"]

DEFAULT_MEMORY_MARGIN = 0.10


def _sizes(base: int, max_batch: int) -> list[int]:
    out, b = [], base
    while b <= max_batch:
        out.append(b)
        b *= 2
    return out


def batch_size_sweep(backend: Any, ctx: Context, knobs: Sequence[Knob], *, budget: Budget, steps: int, warmup: int,
                     timeout: float, batch_sizes: Sequence[int] | None = None, max_batch: int | None = None,
                     memory_cap: int | None = None, memory_margin: float = DEFAULT_MEMORY_MARGIN,
                     effective_batch: int | None = None, progress: Any = None) -> dict[str, Any]:
    """Sweep the batch sizes (see the module docstring); the ``sweep`` section of the result."""
    base = ctx.batch_size or 1
    sizes = sorted(set(batch_sizes)) if batch_sizes else _sizes(base, max_batch or 8 * base)
    cap, cap_source = (memory_cap, "memory_cap option") if memory_cap is not None else default_cap(ctx.device)
    sweep = _Sweep(backend, ctx, knobs, budget=budget, steps=steps, warmup=warmup, timeout=timeout, cap=cap,
                   margin=memory_margin, effective_batch=effective_batch, progress=progress)
    variants = _variants(ctx, knobs)
    largest: dict[str, int | None] = {name: None for name, _ in variants}
    rows: list[dict[str, Any]] = []
    if progress is not None:
        progress.total_add(len(sizes) * len(variants))
    for b in sizes:
        fits_any = False
        for vname, settings in variants:
            row = sweep.row(b, vname, settings)
            rows.append(row)
            if row["status"] == "ok":
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

    def row(self, b: int, vname: str, settings: tuple[Setting, ...]) -> dict[str, Any]:
        row: dict[str, Any] = {"batch_size": b, "variant": vname, "accumulate": 1, "peak_memory": None,
                               "fits": None, "status": "skipped", "samples_per_s": None, "steps_per_s": None,
                               "reason": "", "knobs": [s.to_dict() for s in settings]}
        if self.progress is not None:
            self.progress.start(f"sweep batch {b} {vname}")
        self._measure(row, b, settings)
        if self.progress is not None:
            self.progress.advance()
        return row

    def _measure(self, row: dict[str, Any], b: int, settings: tuple[Setting, ...]) -> None:
        settings, acc = self._accumulation(row, b, settings)
        if acc is None:
            return
        row["accumulate"] = acc
        if not self.budget.fits(self.estimate):
            row["reason"] = "time budget spent"
            return
        fields, _ = merge_recipe_fields([self.by_key[(s.code, s.knob)].recipe_fields(s.value, self.ctx)
                                         for s in settings])
        row["recipe"] = fields
        if self._fits(row, b, settings):
            self._time(row, b, acc, settings)

    def _accumulation(self, row: dict[str, Any], b: int, settings: tuple[Setting, ...]
                      ) -> tuple[tuple[Setting, ...], int | None]:
        """With ``effective_batch``: the accumulation that keeps it (None: this size cannot)."""
        eb = self.effective_batch
        if not eb:
            return settings, 1
        if b > eb or eb % b:
            row["reason"] = f"effective batch {eb} is not a multiple of {b}"
            return settings, None
        acc = eb // b
        if acc > 1:
            if self.accumulate is None:
                row["reason"] = "no accumulation knob registered"
                return settings, None
            settings = settings + (self.accumulate.setting(acc),)
            row["knobs"] = [s.to_dict() for s in settings]
        return settings, acc

    def _fits(self, row: dict[str, Any], b: int, settings: tuple[Setting, ...]) -> bool:
        """One untimed memory probe step: does the batch fit under the cap (with the margin)?"""
        probe = self.backend.run(settings, self.knobs, memory_only=True, batch_size=b, timeout=self.timeout)
        if not probe.ok:
            row.update(fits=False, status=probe.status,
                       reason=("out of memory (caught)" if probe.status == "oom" else probe.message))
            return False
        peak = row["peak_memory"] = probe.peak_memory
        if peak is not None and self.cap is not None and peak * (1 + self.margin) > self.cap:
            row.update(fits=False, status="over_cap",
                       reason=f"peak x {1 + self.margin:g} = {peak * (1 + self.margin) / 2**20:.0f} MiB "
                              f"> cap {self.cap / 2**20:.0f} MiB")
            return False
        row["fits"] = True
        return True

    def _time(self, row: dict[str, Any], b: int, acc: int, settings: tuple[Setting, ...]) -> None:
        timed = self.backend.run(settings, self.knobs, batch_size=b, timeout=self.timeout, steps=self.steps,
                                 warmup=self.warmup)
        self.estimate = max(self.estimate, timed.elapsed)
        if not timed.ok:
            row.update(fits=timed.status != "oom", status=timed.status, reason=timed.message)
            return
        sps = 1.0 / timed.median_step if timed.median_step else None
        row.update(status="ok", steps_per_s=sps, samples_per_s=sps * (timed.batch_size or b * acc) if sps else None,
                   reason="" if row["peak_memory"] is not None else "peak not measurable here: fit assumed")


def _summary(rows: list[dict[str, Any]], largest: dict[str, int | None], ctx: Context, *, cap: int | None,
             cap_source: str, margin: float, effective_batch: int | None) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok" and r["samples_per_s"]]
    best = max(ok, key=lambda r: r["samples_per_s"]) if ok else None
    return {
        "cap": cap, "cap_source": cap_source, "margin": margin, "effective_batch": effective_batch,
        "memory_measure": MEASURE_CUDA if ctx.device == "cuda" else MEASURE_CPU,
        "rows": rows, "largest_fit": largest,
        "recommended": None if best is None else {
            "batch_size": best["batch_size"], "variant": best["variant"], "accumulate": best["accumulate"],
            "samples_per_s": best["samples_per_s"], "recipe": best.get("recipe", {})},
        "note": ("one timed run per row; losses are not compared across batch sizes (a different batch is a "
                 "different optimization: scale the learning rate, or fix effective_batch=)"),
    }
