"""Metrics without per-step syncs, the progress bar, and evaluation.

The step's losses stay on the device; :class:`LossLog` keeps the detached scalars of the
current log interval (a list append per step, no kernel) and reads them all with one
transfer per interval, which is also where inf/NaN is detected (PIT201).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from pitstop.engine.callbacks import NonFiniteLossError
from pitstop.engine.data import batch_size_of
from pitstop.engine.distributed import DistInfo, all_reduce_sum

__all__ = ["LossLog", "Progress", "evaluate"]


class LossLog:
    """Per-interval loss bookkeeping: ``add`` per micro-batch, ``read`` once per interval."""

    def __init__(self, skip_nonfinite: bool):
        self.skip_nonfinite = skip_nonfinite
        self.losses: list[torch.Tensor] = []
        self.steps: list[int] = []

    def add(self, loss: torch.Tensor, step: int) -> None:
        self.losses.append(loss)
        self.steps.append(step)

    def read(self, info: DistInfo, epoch: int) -> float | None:
        """Mean finite loss of the interval over all ranks (one host transfer; one all-reduce
        under DDP). Raises :class:`NonFiniteLossError` naming the first bad optimizer step,
        unless non-finite losses are being skipped."""
        if self.losses:
            values = torch.stack(self.losses).float().tolist()  # the interval's one host sync
        else:
            values = []
        steps, self.losses, self.steps = self.steps, [], []
        finite = [v for v in values if math.isfinite(v)]
        if len(finite) != len(values) and not self.skip_nonfinite:
            i = next(i for i, v in enumerate(values) if not math.isfinite(v))
            raise NonFiniteLossError(
                f"loss is {values[i]} at optimizer step {steps[i]} (epoch {epoch}); training stopped before "
                "writing another checkpoint. Lower the learning rate, check the inputs, or set "
                "Recipe(skip_nonfinite=True) to skip such steps")
        total, count = all_reduce_sum([math.fsum(finite), float(len(finite))], info)
        return total / count if count else None


class Progress:
    """A rich progress bar (steps, samples/s, last logged loss) on stderr, updated once per
    log interval. Off when stderr is not a terminal, on ranks other than 0, or when asked."""

    def __init__(self, enabled: bool | None, total: int | None, rank: int):
        if enabled is None:
            enabled = sys.stderr.isatty()
        self.bar = None
        if enabled and rank == 0:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, \
                TimeElapsedColumn

            self.bar = RichProgress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                                    TimeElapsedColumn(), TextColumn("{task.fields[speed]}"),
                                    TextColumn("loss {task.fields[loss]}"),
                                    console=Console(stderr=True), transient=False)
            self.task = self.bar.add_task("train", total=total, speed="", loss="-")
            self.bar.start()

    def update(self, step: int, record: dict[str, Any]) -> None:
        if self.bar is not None:
            loss = record.get("loss")
            self.bar.update(self.task, completed=step, loss="-" if loss is None else f"{loss:.4f}",
                            speed=f"{record.get('samples_per_s', 0):,.0f} samples/s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def evaluate(model: nn.Module, loader: Iterable, fn: Callable[[nn.Module, Any], Any], *,
             forward_context: Any, move: Callable[[Any], Any] | None) -> dict[str, float]:
    """Sample-weighted means of ``fn(model, batch)`` (a scalar tensor, or a dict of them) over
    ``loader``, in eval mode under ``torch.inference_mode()`` (PIT605, PIT803); the model's
    previous train/eval mode is put back. Sums stay on the device: one read at the end."""
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    total = 0
    started = time.perf_counter()
    try:
        with torch.inference_mode(), forward_context:
            for batch in loader:
                if move is not None:
                    batch = move(batch)
                n = batch_size_of(batch)
                out = fn(model, batch)
                if not isinstance(out, dict):
                    out = {"loss": out}
                for key, value in out.items():
                    if not isinstance(value, torch.Tensor) or value.numel() != 1:
                        raise TypeError(f"eval_fn must return a scalar tensor or a dict of them; {key!r} is {value!r}")
                    contribution = value.detach().float().reshape(()) * n
                    sums[key] = sums[key] + contribution if key in sums else contribution
                total += n
    finally:
        model.train(was_training)
    if not total:
        return {}
    keys = list(sums)
    values = torch.stack([sums[k] for k in keys]).div(total).tolist()  # one host sync
    out = dict(zip(keys, values))
    out["eval_seconds"] = time.perf_counter() - started
    return out
