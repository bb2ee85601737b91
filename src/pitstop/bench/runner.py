"""Run the registered benchmarks (face B) and turn their measurements into verdicts.

The runner never imports a tip: it asks the catalog for ``implementations("B")``
(``pitstop.catalog`` discovers the tip modules). For each benchmark it builds the context, calls ``run``,
computes the claim's ratio with a bootstrap interval of the ratio of medians (over whole
timing rounds, ``pitstop.stats.round_ratio_interval``; over samples, ``pitstop.stats``, otherwise) and the verdict (``pitstop.bench.verdict``), and records the device.
"""

from __future__ import annotations

import datetime as _dt
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pitstop import catalog, stats
from pitstop.bench.base import Benchmark, BenchSkip, Claim, Measurement, Outcome
from pitstop.bench.verdict import CONFIDENCE, ERROR, SKIPPED, Verdict, judge, settled

__all__ = ["BenchResult", "BenchReport", "UnknownBenchmarkError", "available", "select", "run_one", "run_all", "json_schema"]


class UnknownBenchmarkError(LookupError):
    """A code that is not in the catalog, or a tip without a benchmark."""

    def __init__(self, message: str, suggestions: Sequence[str] = ()):
        super().__init__(message)
        self.suggestions = list(suggestions)


def available() -> list[type[Benchmark]]:
    """Every registered benchmark, sorted by tip code."""
    return sorted(catalog.implementations("B"), key=lambda c: (c.tip, c.__name__))


def select(queries: Sequence[str]) -> list[type[Benchmark]]:
    """The benchmarks of the given codes or slugs (all when empty), in catalog order."""
    every = available()
    if not queries:
        return every
    chosen: list[type[Benchmark]] = []
    for q in queries:
        try:
            tip = catalog.get(q)
        except catalog.UnknownTipError as exc:
            have = {c.tip for c in every}
            near = [s for s in exc.suggestions if s.split()[0] in have] or exc.suggestions
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise UnknownBenchmarkError(f"unknown code {q!r}{hint} (benchmarks exist for "
                                        f"{', '.join(sorted(have))})", near) from None
        found = [c for c in every if c.tip == tip.code]
        if not found:
            raise UnknownBenchmarkError(f"{tip.code} ({tip.slug}) has no benchmark; benchmarks exist for "
                                        f"{', '.join(sorted({c.tip for c in every}))}")
        chosen += [c for c in found if c not in chosen]
    return sorted(chosen, key=lambda c: (c.tip, c.__name__))


@dataclass
class BenchResult:
    code: str
    name: str
    title: str
    claim: Claim
    verdict: str
    reason: str
    workload: str = ""
    measurements: list[Measurement] = field(default_factory=list)
    ratio: stats.RatioInterval | None = None
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "benchmark": self.name,
            "title": self.title,
            "claim": self.claim.to_dict(),
            "workload": self.workload,
            "measurements": [m.to_dict() for m in self.measurements],
            "ratio": _ratio_dict(self.ratio),
            "verdict": self.verdict,
            "reason": self.reason,
            "comparisons": self.comparisons,
            "checks": self.checks,
            "notes": self.notes,
            "error": self.error,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class BenchReport:
    mode: str
    device: dict[str, Any]
    started: str
    results: list[BenchResult]
    seconds: float = 0.0
    load_average: dict[str, list[float] | None] = field(default_factory=dict)
    budget: float | None = None

    def to_dict(self) -> dict[str, Any]:
        from pitstop import __version__

        return {
            "pitstop": __version__,
            "mode": self.mode,
            "started": self.started,
            "seconds": round(self.seconds, 2),
            "budget": self.budget,
            "device": self.device,
            "load_average": self.load_average,
            "verdict_rule": _rule_summary(),
            "results": [r.to_dict() for r in self.results],
        }


def _rule_summary() -> str:
    from pitstop.bench import verdict as v

    return (f"speed-up: confirmed when the {v.CONFIDENCE:.0%} interval of the ratio lies above "
            f"{1 + v.NOISE_MARGIN:g} and the ratio reaches {1 - v.CLAIM_TOLERANCE:g} x the claimed factor; "
            f"refuted when the interval lies below 1/{1 + v.NOISE_MARGIN:g} or a check fails; otherwise "
            f"not on this hardware. exact: confirmed when every claimed value matches within "
            f"{v.EXACT_TOLERANCE:.0%}. scope: a claim about GPUs (scope gpu) measured on a device other than "
            f"{'/'.join(v.GPU_DEVICES)} is capped at not on this hardware, its numbers still shown. timing: warm-up "
            f"once, then rounds sized to each benchmark's time budget, stopped as soon as the interval decides "
            f"the verdict.")


def _ratio_dict(r: stats.RatioInterval | None) -> dict[str, float] | None:
    if r is None:
        return None
    return {"value": r.ratio, "low": r.low, "high": r.high, "confidence": r.confidence}


def _pooled(by_name: dict[str, Measurement], names: Sequence[str]) -> list[tuple[int, float]]:
    """(round, value per unit of work) of the named measurements, pooled; round -1 for all
    samples when some measurement was not taken in rounds (the interval then ignores rounds)."""
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"the outcome has no measurement named {', '.join(map(repr, missing))} "
                       f"(it has {', '.join(map(repr, by_name))})")
    out: list[tuple[int, float]] = []
    for n in names:
        m = by_name[n]
        out += list(zip(m.rounds or [-1] * len(m.samples), m.per_work()))
    return out


def _values(pairs: list[tuple[int, float]]) -> list[float]:
    return [v for _, v in pairs]


def _interval(by_name: dict[str, Measurement], base: Sequence[str], cand: Sequence[str]) -> stats.RatioInterval:
    b, c = _pooled(by_name, base), _pooled(by_name, cand)
    if any(r < 0 for r, _ in b + c):
        return stats.ratio_interval(_values(b), _values(c), confidence=CONFIDENCE)
    return stats.round_ratio_interval(b, c, confidence=CONFIDENCE)


def _evaluate(cls: type[Benchmark], outcome: Outcome,
              device: str) -> tuple[stats.RatioInterval, Verdict, list[dict[str, Any]]]:
    claim = cls.claim
    by_name = outcome.by_name()
    if claim.kind == "exact":
        cand = claim.candidate_names
        value = stats.quantile(_values(_pooled(by_name, cand)), 0.5)
        ratio = stats.RatioInterval(value, value, value, 1.0)
        values = {n: stats.quantile(_values(_pooled(by_name, [n])), 0.5) for n in claim.expected}
        values[" + ".join(cand)] = value
        claims = {**claim.expected, " + ".join(cand): claim.ratio}
        verdict = judge("exact", claim.ratio, ratio, device=device, scope=claim.scope, checks=outcome.checks,
                        exact_values=values, exact_claims=claims, unit=by_name[cand[0]].rate_unit())
    else:
        ratio = _interval(by_name, claim.baseline_names, claim.candidate_names)
        verdict = judge("speedup", claim.ratio, ratio, device=device, scope=claim.scope, checks=outcome.checks)
    comparisons = []
    for c in outcome.comparisons:
        r = _interval(by_name, c.baseline_names, c.candidate_names)
        comparisons.append({"label": c.label, "baseline": list(c.baseline_names),
                            "candidate": list(c.candidate_names), "ratio": _ratio_dict(r)})
    return ratio, verdict, comparisons


def _settled(cls: type[Benchmark], device: str) -> Callable[[Sequence[Measurement]], bool]:
    """Does a list of measurements already decide ``cls``'s verdict (``verdict.settled``)? False
    while a measurement the claim names is missing (taken by a later ``ctx.time`` call)."""
    claim = cls.claim

    def decided(measured: Sequence[Measurement]) -> bool:
        if claim.kind == "exact":
            return True
        by_name = {m.name: m for m in measured}
        if any(n not in by_name for n in (*claim.baseline_names, *claim.candidate_names)):
            return False
        ratio = _interval(by_name, claim.baseline_names, claim.candidate_names)
        return settled(ratio, claim.ratio, device=device, scope=claim.scope)
    return decided


def run_one(cls: type[Benchmark], ctx: Any, budget: float | None = None) -> BenchResult:
    """Run one benchmark in ``ctx`` (a :class:`~pitstop.bench.timing.BenchContext`) with
    ``budget`` seconds of timing (default ``ctx.budget``), its timing stopped as soon as the
    verdict is decided; never raises for a benchmark's own failure: it becomes an ``error``
    result with the exception as the reason (a :class:`BenchSkip` a ``skipped`` one)."""
    import torch

    base = dict(code=cls.tip, name=cls.__name__, title=cls.title, claim=cls.claim)
    t0 = time.perf_counter()
    if cls.gpu_only and not ctx.cuda:
        why = f" {cls.gpu_why}" if cls.gpu_why else ""
        return BenchResult(**base, verdict=SKIPPED,
                           reason=f"GPU-only benchmark: needs a CUDA device, and this run is on {ctx.device}.{why}")
    ctx = ctx.bound(ctx.budget if budget is None else budget, _settled(cls, ctx.device))
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(ctx.threads)  # the Timer times with ctx.threads: set-up and first calls too
    try:
        outcome = cls().run(ctx)
        ratio, verdict, comparisons = _evaluate(cls, outcome, ctx.device)
    except BenchSkip as exc:
        return BenchResult(**base, verdict=SKIPPED, reason=exc.reason, seconds=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - one broken benchmark must not lose the others
        return BenchResult(**base, verdict=ERROR, reason=f"error: {type(exc).__name__}: {exc}", error=True,
                           seconds=time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
        if cls.compiles:
            torch._dynamo.reset()  # drop compiled graphs; Inductor's on-disk cache stays
        gc.collect()
        if ctx.cuda:
            torch.cuda.empty_cache()
    return BenchResult(**base, verdict=verdict.verdict, reason=verdict.reason, workload=outcome.workload,
                       measurements=list(outcome.measurements), ratio=ratio, comparisons=comparisons,
                       checks=dict(outcome.checks), notes=[*outcome.notes, *(log.note() for log in ctx.log)],
                       seconds=time.perf_counter() - t0)


def run_all(selected: Sequence[type[Benchmark]], config: Any,
            on_start: Callable[[type[Benchmark]], None] | None = None,
            on_done: Callable[[BenchResult], None] | None = None) -> BenchReport:
    """Run ``selected`` under ``config`` (a :class:`~pitstop.bench.timing.BenchConfig`)."""
    from pitstop.bench.device import device_info, load_average, pick_device
    from pitstop.bench.timing import BenchContext, benchmark_budget

    device = pick_device(config.device)
    ctx = BenchContext(device, config.mode, config.threads)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    load_start = load_average()
    t0 = time.perf_counter()
    results = []
    for i, cls in enumerate(selected):
        if on_start:
            on_start(cls)
        budget = benchmark_budget(ctx.mode, config.run_budget, time.perf_counter() - t0, len(selected) - i)
        result = run_one(cls, ctx, budget)
        results.append(result)
        if on_done:
            on_done(result)
    return BenchReport(mode=config.mode, device=device_info(device, ctx.threads), started=started, results=results,
                       seconds=time.perf_counter() - t0, load_average={"start": load_start, "end": load_average()},
                       budget=config.run_budget)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``pitstop bench --format json`` (shipped as ``bench/schema.json``)."""
    import json
    from importlib.resources import files

    return json.loads(files("pitstop.bench").joinpath("schema.json").read_text(encoding="utf-8"))
