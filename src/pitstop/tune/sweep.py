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
    base = ctx.batch_size or 1
    sizes = sorted(set(batch_sizes)) if batch_sizes else _sizes(base, max_batch or 8 * base)
    if memory_cap is not None:
        cap, cap_source = memory_cap, "memory_cap option"
    else:
        cap, cap_source = default_cap(ctx.device)
    recompute = [k for k in knobs if k.memory_role == "recompute" and k.applies(ctx)]
    accumulate = next((k for k in knobs if k.memory_role == "accumulate"), None)
    variants: list[tuple[str, tuple[Setting, ...]]] = [("plain", ())]
    variants += [(k.label(v), (k.setting(v),)) for k in recompute for v in k.values(ctx)]
    rows: list[dict[str, Any]] = []
    largest: dict[str, int | None] = {name: None for name, _ in variants}
    estimate = 0.0
    if progress is not None:
        progress.total_add(len(sizes) * len(variants))
    for b in sizes:
        fits_any = False
        for vname, settings in variants:
            row: dict[str, Any] = {"batch_size": b, "variant": vname, "accumulate": 1, "peak_memory": None,
                                   "fits": None, "status": "skipped", "samples_per_s": None, "steps_per_s": None,
                                   "reason": "", "knobs": [s.to_dict() for s in settings]}
            rows.append(row)
            if progress is not None:
                progress.start(f"sweep batch {b} {vname}")
            acc = 1
            if effective_batch:
                if b > effective_batch or effective_batch % b:
                    row["reason"] = f"effective batch {effective_batch} is not a multiple of {b}"
                    _advance(progress)
                    continue
                acc = effective_batch // b
                if acc > 1:
                    if accumulate is None:
                        row["reason"] = "no accumulation knob registered"
                        _advance(progress)
                        continue
                    settings = settings + (accumulate.setting(acc),)
                    row["knobs"] = [s.to_dict() for s in settings]
            row["accumulate"] = acc
            if not budget.fits(estimate):
                row["reason"] = "time budget spent"
                _advance(progress)
                continue
            fields, _ = merge_recipe_fields([{(k.tip, k.name): k for k in knobs}[(s.code, s.knob)].recipe_fields(s.value, ctx)
                                             for s in settings])
            row["recipe"] = fields
            probe = backend.run(settings, knobs, memory_only=True, batch_size=b, timeout=timeout)
            if not probe.ok:
                row.update(fits=False, status=probe.status,
                           reason=("out of memory (caught)" if probe.status == "oom" else probe.message))
                _advance(progress)
                continue
            peak = probe.peak_memory
            row["peak_memory"] = peak
            if peak is not None and cap is not None and peak * (1 + memory_margin) > cap:
                row.update(fits=False, status="over_cap",
                           reason=f"peak x {1 + memory_margin:g} = {peak * (1 + memory_margin) / 2**20:.0f} MiB "
                                  f"> cap {cap / 2**20:.0f} MiB")
                _advance(progress)
                continue
            row["fits"] = True
            timed = backend.run(settings, knobs, batch_size=b, timeout=timeout, steps=steps, warmup=warmup)
            estimate = max(estimate, timed.elapsed)
            if not timed.ok:
                row.update(fits=timed.status != "oom", status=timed.status, reason=timed.message)
                _advance(progress)
                continue
            sps = 1.0 / timed.median_step if timed.median_step else None
            row.update(status="ok", steps_per_s=sps, samples_per_s=sps * (timed.batch_size or b * acc) if sps else None,
                       reason="" if peak is not None else "peak not measurable here: fit assumed")
            fits_any = True
            largest[vname] = b
            _advance(progress)
        if not fits_any:
            break
    ok = [r for r in rows if r["status"] == "ok" and r["samples_per_s"]]
    best = max(ok, key=lambda r: r["samples_per_s"]) if ok else None
    return {
        "cap": cap, "cap_source": cap_source, "margin": memory_margin, "effective_batch": effective_batch,
        "memory_measure": MEASURE_CUDA if ctx.device == "cuda" else MEASURE_CPU,
        "rows": rows, "largest_fit": largest,
        "recommended": None if best is None else {
            "batch_size": best["batch_size"], "variant": best["variant"], "accumulate": best["accumulate"],
            "samples_per_s": best["samples_per_s"], "recipe": best.get("recipe", {})},
        "note": ("one timed run per row; losses are not compared across batch sizes (a different batch is a "
                 "different optimization: scale the learning rate, or fix effective_batch=)"),
    }


def _advance(progress: Any) -> None:
    if progress is not None:
        progress.advance()
