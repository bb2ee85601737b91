"""Callbacks for :func:`pitstop.fit`, the state they see, and what ``fit`` returns.

Subclass :class:`Callback` and override the hooks you need; ``fit`` calls only overridden
hooks, so an unused hook costs nothing per step. Hooks run on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Callback", "FitState", "FitResult", "NonFiniteLossError"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became inf/NaN (and ``Recipe.skip_nonfinite`` is off)."""


@dataclass
class FitState:
    """Where training is. ``step``: optimizer steps done; ``epoch``: epochs completed;
    ``pos``: micro-batches consumed in the current epoch; ``samples``: training samples seen.
    ``model`` is the user's module, ``train_model`` what the forward runs (DDP-wrapped and/or
    compiled), ``runner`` the :class:`~pitstop.engine.step.Step`."""

    step: int = 0
    epoch: int = 0
    pos: int = 0
    samples: int = 0
    model: Any = None
    train_model: Any = None
    runner: Any = None
    optimizer: Any = None
    scheduler: Any = None
    recipe: Any = None
    rank: int = 0
    world_size: int = 1
    last_loss: float | None = None
    last_eval: dict[str, float] | None = None


@dataclass
class FitResult:
    """What ``fit`` did. ``history``: one record per log interval (step, epoch, loss,
    samples_per_s, lr); ``evals``: ``(step, metrics)`` pairs."""

    steps: int
    epochs: int
    samples: int
    seconds: float
    last_loss: float | None
    skipped: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    evals: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    checkpoint: Path | None = None
    resumed_from: Path | None = None


class Callback:
    """Base class of ``fit`` callbacks; every hook is optional."""

    def on_fit_start(self, state: FitState) -> None:
        """Before the first step (after a resume has restored the state)."""

    def on_step_end(self, state: FitState, loss: Any) -> None:
        """After each optimizer step; ``loss`` is the last micro-batch's loss, a device
        tensor (reading it with ``.item()`` would add a host sync per step)."""

    def on_log(self, state: FitState, record: dict[str, Any]) -> None:
        """Every ``log_every`` steps, with the interval's mean loss and throughput."""

    def on_eval(self, state: FitState, metrics: dict[str, float]) -> None:
        """After an evaluation pass."""

    def on_checkpoint(self, state: FitState, path: Path) -> None:
        """After a checkpoint was written (rank 0)."""

    def on_fit_end(self, state: FitState, result: FitResult) -> None:
        """After the last step."""

    def on_exception(self, state: FitState, exc: BaseException) -> None:
        """When the training loop raises (the exception is re-raised afterwards): release
        what the callback holds (hooks, profilers, trackers)."""


def overridden(callbacks: list[Callback], hook: str) -> list[Any]:
    """Bound ``hook`` methods of the callbacks that override it."""
    base = getattr(Callback, hook)
    return [getattr(cb, hook) for cb in callbacks if getattr(type(cb), hook) is not base]
