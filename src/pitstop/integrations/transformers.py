"""``PitstopDoctorCallback``: the doctor inside an HF ``Trainer`` (optional; needs transformers).

    from pitstop.integrations.transformers import PitstopDoctorCallback

    Trainer(model=model, args=args, train_dataset=ds,
            callbacks=[PitstopDoctorCallback(steps=20, save="doctor.json")]).train()

The instrumentation is installed in this process for the window only (from optimizer step
``start_step``), then removed. ``callback.report`` holds the :class:`pitstop.doctor.DoctorReport`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from pitstop.integrations._window import DoctorWindow

__all__ = ["PitstopDoctorCallback"]


class PitstopDoctorCallback(TrainerCallback):
    def __init__(self, steps: int = 10, warmup: int = 2, *, start_step: int = 0, probes: bool = True,
                 save: str | Path | None = None, print_report: bool = True) -> None:
        self.window = DoctorWindow("<transformers Trainer.train>", steps=steps, warmup=warmup,
                                   start_step=start_step, probes=probes, save=save, print_report=print_report)

    @property
    def report(self) -> Any:
        return self.window.report

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.maybe_start(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.maybe_finish()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.maybe_finish(force=True)
