"""The part both callbacks share: a doctor window over training steps, and its output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

__all__ = ["DoctorWindow"]


class DoctorWindow:
    """Starts :class:`pitstop.doctor.record.session.DoctorSession` at optimizer step ``start_step``
    (counted by the framework), finishes it after ``warmup + steps`` (+1 profiled) steps,
    prints the report (``print_report``) and writes it to ``save`` (``.json`` or ``.html``)."""

    def __init__(self, target: str, *, steps: int, warmup: int, start_step: int, probes: bool,
                 save: str | Path | None, print_report: bool) -> None:
        if steps < 1 or warmup < 0 or start_step < 0:
            raise ValueError(f"steps must be >= 1, warmup and start_step >= 0; got steps={steps}, "
                             f"warmup={warmup}, start_step={start_step}")
        if save is not None and Path(save).suffix.lower() not in (".json", ".html"):
            raise ValueError(f"save={str(save)!r}: use a .json or .html file name")
        self.target, self.steps, self.warmup, self.start_step = target, steps, warmup, start_step
        self.probes, self.save, self.print_report = probes, save, print_report
        self.session: Any = None
        self.report: Any = None

    def maybe_start(self, global_step: int) -> None:
        if self.session is None and self.report is None and global_step >= self.start_step:
            from pitstop.doctor.record.session import DoctorSession

            self.session = DoctorSession(self.target, self.steps, self.warmup, probes=self.probes)
            self.session.start()

    def maybe_finish(self, *, force: bool = False) -> None:
        if self.session is None or not (force or self.session.finished):
            return
        session, self.session = self.session, None
        from pitstop.report.doctor_report import DoctorReport

        self.report = DoctorReport.of(session.finish(status="finished" if session.finished else "exited",
                                                     message="" if session.finished else "training ended inside the doctor's window"))
        if self.print_report:
            self.report.print(file=sys.stderr)
        if self.save is not None:
            path = Path(self.save)
            if path.suffix.lower() == ".html":
                self.report.html(path)
            else:
                from pitstop.jsoncodec import dumps

                path.write_text(dumps(self.report.to_dict()) + "\n", encoding="utf-8")
            print(f"pitstop: doctor report written to {path}", file=sys.stderr)
