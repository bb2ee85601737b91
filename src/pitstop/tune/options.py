"""What a search is given: its options, its time budget, the backend that runs a
configuration, the knobs selected (torch-free)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.run import Run
from pitstop.tune.verdict import DEFAULT_CONFIDENCE, DEFAULT_MARGIN

__all__ = ["TuneOptions", "Backend", "TuneError", "Budget", "BenchPrior", "select_knobs", "merge_recipe_fields",
           "read_bench_priors"]


class TuneError(RuntimeError):
    """The search cannot start or cannot go on (the baseline itself fails)."""


@dataclass(frozen=True)
class BenchPrior:
    """A ratio ``pitstop bench CODE`` measured (``ratio``: the benchmark's whole-step speed-up) on
    ``device`` (``"cpu"`` / ``"cuda"``, named by ``device_name``): the racing scheduler's prior for
    that tip's knob when the training runs on the same kind of device (it orders the measuring;
    verdicts come from pairs only)."""

    code: str
    ratio: float
    device: str
    device_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "ratio": self.ratio, "device": self.device, "device_name": self.device_name}


def read_bench_priors(path: str) -> tuple[BenchPrior, ...]:
    """The measured ratios of a ``pitstop bench --format json`` report; ValueError naming the
    file and what is wrong."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ValueError(f"{path}: not a pitstop bench JSON report (no 'results' list)")
    dev = data.get("device") if isinstance(data.get("device"), dict) else {}
    kind = str(dev.get("device") or "cpu")
    gpu = dev.get("gpu") if isinstance(dev.get("gpu"), dict) else {}
    name = str(gpu.get("name") or dev.get("cpu_model") or "")
    out = []
    for i, r in enumerate(data["results"]):
        ratio = r.get("ratio") if isinstance(r, dict) else None
        value = ratio.get("ratio") if isinstance(ratio, dict) else None
        if r.get("error") or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
            continue
        code = r.get("code")
        if not isinstance(code, str):
            raise ValueError(f"{path}: results[{i}] has no tip code")
        out.append(BenchPrior(code.upper(), float(value), kind, name))
    return tuple(out)


@dataclass(frozen=True)
class TuneOptions:
    steps: int = 10                  # observed optimizer steps per run
    warmup: int = 3                  # optimizer steps before measuring (compilation, caches)
    repeats: int = 3                 # pairs before a verdict (at least 2: no verdict from one pair)
    max_pairs: int = 8               # pairs after which an undecided trial is "no gain"
    budget: float | None = None      # seconds for the whole search
    timeout: float = 300.0           # seconds for one run
    margin: float = DEFAULT_MARGIN   # required speed-up beyond the noise
    confidence: float = DEFAULT_CONFIDENCE
    only: tuple[str, ...] = ()       # tip codes or knob names; empty: every knob
    max_combine: int = 4             # candidates tried in the greedy phase
    seed: int = 0
    #: knob values to try even where the knob does not choose them by default: "KNOB=VALUE"
    #: (KNOB a knob name or tip code), e.g. "autocast=fp16"; a value that cannot run still says why
    try_values: tuple[str, ...] = ()
    #: measure more steps per run (up to ``MORE_STEPS`` x ``steps``) where a run's set-up dominates
    #: it, so that a pair costs mostly measuring (``pitstop tune --steps N`` fixes the count)
    more_steps: bool = True
    #: ratios ``pitstop bench`` measured on this device: the scheduler's priors (``--bench-report``)
    bench: tuple[BenchPrior, ...] = ()

    def __post_init__(self) -> None:
        for name, low in (("steps", 1), ("warmup", 0), ("repeats", 1), ("max_pairs", 1), ("max_combine", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout!r}")
        if not 0 <= self.margin < 10:
            raise ValueError(f"margin must be in [0, 10), got {self.margin!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence!r}")
        for item in self.try_values:
            knob, _, value = str(item).partition("=")
            if not knob.strip() or not value.strip():
                raise ValueError(f"try_values: expected KNOB=VALUE (e.g. autocast=fp16), got {item!r}")

    def asked(self, knob: Knob) -> list[Any]:
        """The values of ``knob`` that ``try_values`` asks for (ints and booleans parsed)."""
        out: list[Any] = []
        for item in self.try_values:
            name, _, text = item.partition("=")
            name, text = name.strip(), text.strip()
            if name.upper() != knob.tip and name.lower() != knob.name:
                continue
            low = text.lower()
            value: Any = (True if low == "true" else False if low == "false"
                          else int(text) if text.lstrip("-").isdigit() else text)
            if value not in out:
                out.append(value)
        return out

    @property
    def min_pairs(self) -> int:
        return max(2, self.repeats)

    @property
    def most_pairs(self) -> int:
        return max(self.min_pairs, self.max_pairs)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "warmup": self.warmup, "repeats": self.repeats, "budget": self.budget,
                "timeout": self.timeout, "margin": self.margin, "confidence": self.confidence,
                "only": list(self.only), "max_pairs": self.max_pairs, "max_combine": self.max_combine, "seed": self.seed,
                "try_values": list(self.try_values), "more_steps": self.more_steps,
                "bench": [b.to_dict() for b in self.bench]}


class Backend(Protocol):
    """How configurations run: :class:`pitstop.tune.script.ScriptBackend` (child processes)
    or :class:`pitstop.tune.inprocess.ApiBackend` (in process, through ``make_step``)."""

    mode: str
    target: str

    def context(self) -> Context: ...

    def run(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, round: int, timeout: float,
            steps: int, warmup: int) -> Run: ...

    def close(self) -> None: ...


class Budget:
    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.start = clock()
        self.exhausted = False

    @property
    def spent(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.spent

    def fits(self, estimate: float) -> bool:
        """Whether ``estimate`` seconds fit what is left; when not, the budget counts as
        exhausted (a run was skipped)."""
        ok = self.remaining() >= estimate
        if not ok:
            self.exhausted = True
        return ok

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "spent": round(self.spent, 3), "exhausted": self.exhausted}


def _matches(knob: Knob, only: Sequence[str]) -> bool:
    return not only or any(o.upper() == knob.tip or o.lower() == knob.name for o in only)


def select_knobs(knobs: Sequence[Knob], only: Sequence[str]) -> list[Knob]:
    """Knobs selected by ``only`` (tip codes or knob names); ValueError naming an unknown one."""
    unknown = [o for o in only if not any(o.upper() == k.tip or o.lower() == k.name for k in knobs)]
    if unknown:
        known = ", ".join(sorted({k.tip for k in knobs} | {k.name for k in knobs}))
        raise ValueError(f"--only: no knob for {', '.join(map(repr, unknown))}; knobs: {known}")
    return [k for k in knobs if _matches(k, only)]


def merge_recipe_fields(parts: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """Merge the Recipe fields of several settings; the second item names a conflict."""
    merged: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if k in merged and merged[k] != v:
                return merged, f"both set Recipe.{k} ({merged[k]!r} vs {v!r})"
            merged[k] = v
    return merged, None
