"""``PitstopDoctor``: the doctor inside a Lightning ``Trainer.fit`` (optional; needs lightning).

    from pitstop.integrations.lightning import PitstopDoctor

    trainer = L.Trainer(..., callbacks=[PitstopDoctor(steps=20, save="doctor.html")])
    trainer.fit(model, loader)     # prints the report after warmup + 20 steps, training goes on

The instrumentation is installed in this process for the window only (from optimizer step
``start_step``), then removed: the rest of the training runs untouched. ``callback.report``
holds the :class:`pitstop.doctor.DoctorReport`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - the standalone package
    from pytorch_lightning.callbacks import Callback

from pitstop.integrations._window import DoctorWindow

__all__ = ["PitstopDoctor"]


class PitstopDoctor(Callback):
    def __init__(self, steps: int = 10, warmup: int = 2, *, start_step: int = 0, probes: bool = True,
                 save: str | Path | None = None, print_report: bool = True) -> None:
        super().__init__()
        self.window = DoctorWindow("<lightning Trainer.fit>", steps=steps, warmup=warmup, start_step=start_step,
                                   probes=probes, save=save, print_report=print_report)

    @property
    def report(self) -> Any:
        return self.window.report

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.window.maybe_start(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.window.maybe_finish()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.window.maybe_finish(force=True)
