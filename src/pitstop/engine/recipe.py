"""The :class:`Recipe`: every training trick the engine applies, as one frozen dataclass.

A recipe is plain data (torch-free, so the CLI and ``tune`` can parse and compare recipes
without importing torch). It is validated on construction; every error repeats the bad
value and names the field. ``to_dict()`` / ``from_dict()`` round-trip, and recipes load from
JSON or TOML files (a top-level table, or a ``[recipe]`` table).

``tune`` hands back its winning recipe as a :class:`Recipe`, so the field names, types and
defaults below are a stable interface: add fields with defaults that keep old files valid.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["Recipe", "RecipeError", "PRECISIONS", "COMPILE_MODES", "OPTIMIZER_IMPLS", "STRATEGIES"]

PRECISIONS = ("fp32", "tf32", "bf16-mixed", "fp16-mixed")
STRATEGIES = ("ddp", "fsdp2")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
_DEVICE = re.compile(r"^(auto|cpu|mps|(cuda|xpu)(:\d+)?)$")


class RecipeError(ValueError):
    """An invalid recipe value, or a recipe file that cannot be read."""


@dataclass(frozen=True)
class Recipe:
    """How the engine trains. Every field has a default that changes nothing about the
    user's own setup (fp32, no accumulation, no clipping, the loader as given).

    Precision and math
        ``precision``: ``"fp32"`` | ``"tf32"`` (fp32 tensors, TF32 matmuls/convs on CUDA) |
        ``"bf16-mixed"`` (autocast bf16, no scaler) | ``"fp16-mixed"`` (autocast fp16 + GradScaler).
        ``accumulate``: micro-batches per optimizer step (>= 1).
        ``clip_norm`` / ``clip_value``: gradient clipping (at most one), applied after
        ``unscale_`` under fp16. ``skip_nonfinite``: skip optimizer steps whose loss is
        inf/NaN (one host sync per optimizer step) instead of raising.
    Model and kernels
        ``channels_last``: model and 4-D inputs in NHWC. ``compile``: ``None`` (eager) or a
        ``torch.compile`` mode. ``optimizer_impl``: ``"fused"`` | ``"foreach"`` |
        ``"for-loop"`` | ``None`` (keep the optimizer as built). ``cudnn_benchmark``.
        ``checkpoint_activations``: qualified names (``fnmatch`` patterns) of submodules whose
        forward is recomputed in backward.
    Data
        ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch``
        (``prefetch_factor``): ``None`` keeps what the given DataLoader has.
        ``non_blocking``: host-to-device copies with ``non_blocking=True``.
    Run
        ``seed`` (``fit`` seeds every RNG with it; ``None``: leave them), ``deterministic``
        (``torch.use_deterministic_algorithms``), ``device`` (``"auto"``: CUDA if present),
        ``threads``: torch's intra-op threads while the step exists (``torch.set_num_threads``;
        ``None`` keeps the process's; PIT108).
    Data parallelism (under ``torchrun``, :mod:`pitstop.engine.distributed`)
        ``strategy``: ``"ddp"`` (``DistributedDataParallel``: every rank holds the whole
        model, its gradients and optimizer state) | ``"fsdp2"`` (``fully_shard`` per block and
        at the root: parameters, gradients and optimizer state divided by the ranks, PIT706).
        FSDP2 only: ``shard_units`` (``fnmatch`` patterns of the submodules that become units;
        empty: the blocks of the model's largest ``ModuleList``), ``reshard_after_forward``
        (free each block's gathered parameters after its forward, every block but the last;
        False keeps them to backward: fewer all-gathers, more memory, PIT705),
        ``shard_prefetch`` (each block's all-gather issued one block ahead, PIT705).
    """

    precision: str = "fp32"
    accumulate: int = 1
    clip_norm: float | None = None
    clip_value: float | None = None
    skip_nonfinite: bool = False
    channels_last: bool = False
    compile: str | None = None
    optimizer_impl: str | None = None
    cudnn_benchmark: bool = False
    checkpoint_activations: tuple[str, ...] = field(default=())
    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch: int | None = None
    non_blocking: bool = True
    seed: int | None = None
    deterministic: bool = False
    device: str = "auto"
    strategy: str = "ddp"
    shard_units: tuple[str, ...] = field(default=())
    reshard_after_forward: bool = True
    shard_prefetch: bool = False
    threads: int | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalize a few spellings on the frozen instance
        _one_of("precision", self.precision, PRECISIONS)
        _int("accumulate", self.accumulate, low=1)
        for name in ("clip_norm", "clip_value"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    raise RecipeError(f"Recipe.{name} must be a finite number > 0 or None, got {value!r}")
                set_(self, name, float(value))
        if self.clip_norm is not None and self.clip_value is not None:
            raise RecipeError(f"Recipe: set clip_norm ({self.clip_norm!r}) or clip_value ({self.clip_value!r}), not both")
        for name in ("skip_nonfinite", "channels_last", "cudnn_benchmark", "non_blocking", "deterministic"):
            _bool(name, getattr(self, name))
        compile_ = self.compile
        if compile_ is False or compile_ == "off":
            compile_ = None
        elif compile_ is True:
            compile_ = "default"
        if compile_ is not None:
            _one_of("compile", compile_, COMPILE_MODES, extra="None or 'off'")
        set_(self, "compile", compile_)
        if self.optimizer_impl is not None:
            _one_of("optimizer_impl", self.optimizer_impl, OPTIMIZER_IMPLS, extra="None (keep)")
        if self.deterministic and self.cudnn_benchmark:
            raise RecipeError("Recipe: deterministic=True conflicts with cudnn_benchmark=True (PIT902): "
                              "the autotuner may pick a different algorithm on every run")
        names = self.checkpoint_activations
        if isinstance(names, str):
            names = (names,)
        if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) and n.strip() for n in names):
            raise RecipeError(f"Recipe.checkpoint_activations must be a list of submodule names, got {self.checkpoint_activations!r}")
        set_(self, "checkpoint_activations", tuple(names))
        if self.num_workers is not None:
            _int("num_workers", self.num_workers, low=0)
        for name in ("pin_memory", "persistent_workers"):
            if getattr(self, name) is not None:
                _bool(name, getattr(self, name))
        if self.prefetch is not None:
            _int("prefetch", self.prefetch, low=1)
        if self.num_workers == 0 and self.persistent_workers:
            raise RecipeError("Recipe.persistent_workers=True needs num_workers > 0, got num_workers=0")
        if self.num_workers == 0 and self.prefetch is not None:
            raise RecipeError(f"Recipe.prefetch={self.prefetch!r} needs num_workers > 0 (it is the DataLoader's "
                              "prefetch_factor, batches loaded ahead per worker), got num_workers=0")
        if self.seed is not None:
            _int("seed", self.seed, low=0, high=2**32 - 1)
        if self.threads is not None:
            _int("threads", self.threads, low=1)
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise RecipeError(f"Recipe.device must be 'auto', 'cpu', 'cuda', 'cuda:N', 'mps' or 'xpu[:N]', got {self.device!r}")
        self._check_strategy()

    def _check_strategy(self) -> None:
        _one_of("strategy", self.strategy, STRATEGIES)
        units = self.shard_units
        if isinstance(units, str):
            units = (units,)
        if not isinstance(units, (tuple, list)) or not all(isinstance(n, str) and n.strip() for n in units):
            raise RecipeError(f"Recipe.shard_units must be a list of submodule names, got {self.shard_units!r}")
        object.__setattr__(self, "shard_units", tuple(units))
        for name in ("reshard_after_forward", "shard_prefetch"):
            _bool(name, getattr(self, name))
        if self.strategy != "fsdp2":
            extra = [f"{n}={getattr(self, n)!r}" for n, off in (("shard_units", ()), ("reshard_after_forward", True),
                                                                ("shard_prefetch", False)) if getattr(self, n) != off]
            if extra:
                raise RecipeError(f"Recipe: {', '.join(extra)} apply to strategy='fsdp2' only, got "
                                  f"strategy={self.strategy!r}")

    # -- conversion --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (tuples become lists), every field present."""
        out = dataclasses.asdict(self)
        out["checkpoint_activations"] = list(self.checkpoint_activations)
        out["shard_units"] = list(self.shard_units)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "") -> Recipe:
        """Build from a mapping; unknown keys are an error (with near matches)."""
        where = f"{source}: " if source else ""
        if not isinstance(data, dict):
            raise RecipeError(f"{where}a recipe must be a table/object of fields, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = [k for k in data if k not in known]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(str(k), sorted(known), n=1)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise RecipeError(f"{where}unknown recipe field(s) {', '.join(hints)}; known: {', '.join(sorted(known))}")
        try:
            return cls(**data)
        except RecipeError as exc:
            raise RecipeError(f"{where}{exc}") from None

    def replace(self, **changes: Any) -> Recipe:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def changed(self) -> dict[str, Any]:
        """Fields that differ from the defaults (what a recipe file needs to say)."""
        default = Recipe().to_dict()
        return {k: v for k, v in self.to_dict().items() if v != default[k]}

    # -- files ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> Recipe:
        """Load a ``.json`` or ``.toml`` file. Errors name the file (and line, if known)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RecipeError(f"{path}: cannot read recipe: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise RecipeError(f"{path}: not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} at offset "
                              f"{exc.start}): a recipe is .json or .toml text") from None
        suffix = _format_of(path)
        try:
            data = json.loads(text) if suffix == ".json" else tomllib.loads(text)
        except json.JSONDecodeError as exc:
            raise RecipeError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        except tomllib.TOMLDecodeError as exc:
            raise RecipeError(f"{path}: invalid TOML: {exc}") from None
        except RecursionError:
            raise RecipeError(f"{path}: invalid recipe: nested too deeply") from None
        if isinstance(data, dict) and set(data) == {"recipe"}:
            data = data["recipe"]
        return cls.from_dict(data, source=str(path))

    def save(self, path: str | Path) -> Path:
        """Write ``.json`` (every field) or ``.toml`` (fields that are not None), atomically."""
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=2) + "\n" if _format_of(path) == ".json" else self.to_toml()
        from pitstop.atomic import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)  # a reader never sees half a recipe file
        return path

    def to_toml(self) -> str:
        """A ``[recipe]`` table; ``None`` fields are left out (TOML has no null; every field
        that may be ``None`` defaults to ``None``, so leaving it out round-trips)."""
        lines = ["[recipe]"]
        for key, value in self.to_dict().items():
            if value is not None:
                lines.append(f"{key} = {_toml_value(value)}")
        return "\n".join(lines) + "\n"


def _format_of(path: Path) -> str:
    """``.json`` or ``.toml`` (the suffix, any case); RecipeError for anything else."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise RecipeError(f"{path}: unknown recipe format {suffix or '(no suffix)'!r}; use .json or .toml")
    return suffix


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _one_of(name: str, value: Any, allowed: tuple[str, ...], extra: str = "") -> None:
    if value not in allowed:
        choices = ", ".join(repr(a) for a in allowed) + (f", or {extra}" if extra else "")
        raise RecipeError(f"Recipe.{name} must be one of {choices}; got {value!r}")


def _int(name: str, value: Any, low: int, high: int | None = None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RecipeError(f"Recipe.{name} must be an int {bound}, got {value!r}")


def _bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise RecipeError(f"Recipe.{name} must be true or false, got {value!r}")
