"""The knob face (K): one switchable trick that ``tune`` measures A/B (torch-free).

A tip module declares ``class AutocastKnob(Knob, tip="PIT301")`` at its end (under
``# --- knob face ---``); the class registers itself through :class:`pitstop.catalog.Face`
and the tuner finds it with ``catalog.implementations("K")``. The tuner never names a tip.

A knob answers, from the :class:`Context` (what was observed of the user's training):

- :meth:`Knob.applies`: whether it can apply at all, and if not, why ("CUDA only", "no
  conv layer", "already on");
- :meth:`Knob.values`: the settings worth trying (one trial each);
- :meth:`Knob.recipe_fields`: the :class:`pitstop.Recipe` fields a value sets, so a winning
  combination *is* a Recipe (and two knobs that set one field differently conflict);
- :meth:`Knob.apply_in_child` (script mode): what to do in the child process before the
  user's unmodified script starts (patch ``DataLoader`` defaults, wrap the top-level
  model's forward ...); it runs through the doctor's setup seam, see
  :func:`pitstop.tune.child.apply_knob`;
- :meth:`Knob.snippet`: the code to paste into the user's script.

Methods that need torch import it inside their bodies: loading the catalog stays torch-free.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pitstop.catalog import Face, implementations

__all__ = ["Knob", "Setting", "Context", "Applicability", "all_knobs", "combined_snippet", "recipe_snippet"]


@dataclass(frozen=True)
class Context:
    """What a knob may ask about the training it is tried on (plain data, JSON-able).

    Filled from the doctor's observations (script mode) or by inspecting the model, loader
    and optimizer (API mode). ``None`` means "not known".
    """

    mode: str = "script"                     # "script" or "api"
    device: str = "cpu"                      # "cpu" | "cuda"
    device_name: str = ""
    capability: tuple[int, int] | None = None  # CUDA compute capability
    cpu_count: int = 1
    num_threads: int | None = None           # torch intra-op threads the training ran with (None: not known)
    conv2d: int = 0                          # Conv2d modules in the trained model
    input_dims: int | None = None            # dims of the model's first input (4 = images)
    autocast: str | None = None              # autocast dtype already active in training forwards
    compiled: bool = False                   # the script compiles the model itself
    recompiles: int = 0                      # recompilations dynamo reported in the survey
    recompile_limit_hit: bool = False        # ... and a function hit the recompile limit (runs eagerly)
    static_shapes: bool = False              # the script compiles with dynamic=False
    optimizer: str | None = None             # class name of the (first) optimizer
    optimizer_mode: str | None = None        # "fused" | "foreach" | "for-loop"
    fused_available: bool = False            # the optimizer class accepts fused=True
    loader_workers: int | None = None        # num_workers of the training DataLoader (None: none seen)
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None
    cudnn_benchmark: bool = False
    float32_matmul_precision: str = "highest"
    blocks: tuple[str, ...] = ()             # API: submodule patterns activation checkpointing may wrap
    framework: str | None = None             # "lightning" | "fabric" | "transformers" | "accelerate" (detected)
    strategy: str | None = None              # data parallelism of a torchrun job: "ddp" | "fsdp2" | "fsdp1"
    world_size: int = 1                      # ranks of the job (torchrun's WORLD_SIZE)
    #: share of the step time of each doctor phase in the survey (``("optimizer", 0.004)``, ...)
    phase_shares: tuple[tuple[str, float], ...] = ()
    #: what ended a step in the survey: "optimizer.step", or "backward" for manual parameter
    #: updates (whose time the doctor counts in its ``host`` phase)
    step_boundary: str | None = None
    backward_calls: int | None = None        # backward calls the survey saw (None: not surveyed)
    scaler_calls: int = 0                    # GradScaler.scale calls the survey saw (the script scales itself)
    notes: tuple[str, ...] = field(default=())

    def share(self, phases: tuple[str, ...]) -> float | None:
        """Share of the step spent in ``phases`` (None: not surveyed)."""
        shares = dict(self.phase_shares)
        return sum(shares.get(p, 0.0) for p in phases) if shares else None

    @property
    def on_cuda(self) -> bool:
        return self.device == "cuda"

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        d = dataclasses.asdict(self)
        d["capability"] = list(self.capability) if self.capability else None
        d["blocks"], d["notes"] = list(self.blocks), list(self.notes)
        d["phase_shares"] = dict(self.phase_shares)
        return d


@dataclass(frozen=True)
class Applicability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Setting:
    """One value of one knob: what a trial switches on. JSON form: ``to_dict()``."""

    code: str       # tip code, e.g. "PIT301"
    knob: str       # the knob's name, e.g. "autocast"
    value: Any      # JSON-able: 2, "bf16", True
    label: str      # for people: "num_workers=2"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "knob": self.knob, "value": self.value, "label": self.label}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Setting:
        return cls(d["code"], d["knob"], d["value"], d.get("label", f"{d['knob']}={d['value']}"))


class Knob(Face, face="K"):
    """Base of every knob face. Subclass with ``tip="PITnnn"`` and set ``name`` and ``title``.

    Class attributes:

    - ``name``: short stable identifier (``--only`` accepts it, like the tip code).
    - ``title``: one line for the table.
    - ``modes``: where it can be tried: ``"script"`` (child-process setup before the user's
      script) and/or ``"api"`` (a :class:`Recipe` for ``make_step``).
    - ``reduced_precision``: the trick changes the arithmetic (bf16/fp16/TF32): the loss
      check uses the wider floor :data:`pitstop.tune.equivalence.FLOOR_REDUCED`.
    - ``memory_role``: ``None`` for speed knobs; ``"recompute"`` (saves memory at a compute
      cost) or ``"accumulate"`` (splits a batch) for the knobs the API batch-size sweep uses.
    - ``order``: where its child setup runs and where it sits in the table (low first); the
      model-wrapping knobs run in ``order``: layout (10), precision (20), compile (90).
    - ``expensive``: trials cost much more than a plain run (compilation): measured after the
      cheap tricks are decided, on top of their path; the first run's cost is reported apart.
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    modes: ClassVar[tuple[str, ...]] = ("script", "api")

    def __init_subclass__(cls, *, tip: str | None = None, register: bool = True, **kw: Any) -> None:
        """``register=False`` keeps the class out of the catalog (a test's planted knob,
        handed to the tuner explicitly with ``knobs=[...]``) while still naming a code."""
        if tip is not None and not (cls.name and cls.title):
            raise TypeError(f"{cls.__qualname__}: a knob needs a name and a title")
        if register:
            super().__init_subclass__(tip=tip, **kw)
        else:
            super().__init_subclass__(**kw)
            cls.tip = tip or ""
    reduced_precision: ClassVar[bool] = False
    memory_role: ClassVar[str | None] = None
    order: ClassVar[int] = 50
    expensive: ClassVar[bool] = False

    # -- what to try -------------------------------------------------------------------
    def applies(self, ctx: Context) -> Applicability:
        """Whether this knob can change anything in ``ctx`` (and if not, why)."""
        return Applicability(True)

    def values(self, ctx: Context) -> list[Any]:
        """The values to try, one trial each (JSON-able)."""
        return [True]

    def not_tried(self, ctx: Context) -> dict[Any, str]:
        """Values this knob has but does not try here by default, each with why (a note of the
        report says it; :attr:`pitstop.tune.options.TuneOptions.try_values` asks for one anyway)."""
        return {}

    def cannot_run(self, value: Any, ctx: Context) -> str | None:
        """Why ``value`` cannot be applied to this training (e.g. the script's structure gives
        it nothing safe to patch): it is not run, even when asked for. None: it can."""
        return None

    def label(self, value: Any) -> str:
        return self.name if value is True else f"{self.name}={value}"

    def phases(self, value: Any, ctx: Context) -> tuple[str, ...]:
        """The step phases (:data:`pitstop.doctor.analysis.observations.PHASES`) that ``value`` can
        make faster, when it can touch nothing else; empty: any part of the step. The tuner
        does not measure a value whose phases are too small a share of the step to reach
        the bar even if they vanished (Amdahl)."""
        return ()

    def setting(self, value: Any) -> Setting:
        return Setting(self.tip, self.name, value, self.label(value))

    # -- what a measurement means ------------------------------------------------------
    def unavailable(self, value: Any, run: Any) -> str | None:
        """Why a failed run (:class:`pitstop.tune.result.Run`, the baseline ran) shows that
        ``value`` cannot run this training on this machine (no kernel for it here): the trial
        is then ``not_applicable`` with that reason instead of ``failed``. None: a failure."""
        return None

    def hardware_note(self, value: Any, ctx: Context, speed: Any) -> Any:
        """A :class:`pitstop.machine.HardwareNote` when the machine explains the speed
        measured (:class:`pitstop.paired.Decision` vs the baseline), else None."""
        return None

    # -- how to apply ------------------------------------------------------------------
    def recipe_fields(self, value: Any, ctx: Context) -> dict[str, Any]:
        """:class:`pitstop.Recipe` fields that ``value`` sets (API trials run with them;
        the winning combination is saved as a Recipe)."""
        raise NotImplementedError

    def apply_in_child(self, value: Any, **kwargs: Any) -> None:
        """Script mode: run in the child process after the doctor's instrumentation and
        before the user's script (``kwargs`` as returned by :meth:`child_kwargs`)."""
        raise NotImplementedError(f"{type(self).__name__} ({self.tip}) has no script-mode setup")

    def child_kwargs(self, value: Any, ctx: Context) -> dict[str, Any]:
        """Extra JSON-able arguments :meth:`apply_in_child` needs (e.g. the device type)."""
        return {"device": ctx.device}

    def explain(self, value: Any, records: list[Any], trial: Any) -> Any:
        """What the trial's runs showed beyond their speed, as a
        :class:`pitstop.tune.explanation.Explanation` (None: nothing to add). ``records``: the
        runs' :class:`pitstop.doctor.analysis.compile_records.CompileRecord` (runs that compiled
        anything); ``trial``: the judged :class:`pitstop.tune.result.Trial` (status, speed)."""
        return None

    def snippet(self, value: Any, ctx: Context) -> str:
        """Python lines to paste into the user's training script."""
        return ""


def all_knobs() -> list[Knob]:
    """One instance of every registered knob, in ``(order, tip)`` order (catalog loaded)."""
    return [cls() for cls in sorted(implementations("K"), key=lambda c: (c.order, c.tip, c.name))]


# -- paste-ready code for a winning combination (each knob writes its own lines) --
def combined_snippet(parts: Sequence[tuple[Knob, Any]], ctx: Context) -> str:
    """Code for every (knob, value) of a combination, knob by knob."""
    blocks = []
    for knob, value in sorted(parts, key=lambda kv: (kv[0].order, kv[0].tip)):
        body = textwrap.dedent(knob.snippet(value, ctx)).strip("\n")
        if body:
            blocks.append(f"# {knob.tip} {knob.title} ({knob.label(value)})\n{body}")
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def recipe_snippet(changed: dict[str, Any]) -> str:
    """``Recipe(...)`` with the fields that differ from the defaults, for ``pitstop.fit``."""
    args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
    return (f"recipe = pitstop.Recipe({args})\n"
            "pitstop.fit(model, optimizer, loss_fn, train_loader, recipe=recipe, max_steps=...)\n")
