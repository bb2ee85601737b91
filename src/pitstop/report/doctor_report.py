"""``DoctorReport``: a doctor :class:`~pitstop.doctor.analysis.diagnosis.Diagnosis` with rendering shortcuts.

``report.print()`` is the terminal report (:mod:`pitstop.report.doctor_terminal`),
``report.html(path)`` the offline page (:mod:`pitstop.report.doctor_html`); everything else
(``findings``, ``to_dict()``, ``outcome`` ...) is the diagnosis itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pitstop.doctor.analysis.diagnosis import Diagnosis

__all__ = ["DoctorReport"]


class DoctorReport(Diagnosis):
    """A :class:`Diagnosis` with rendering shortcuts."""

    @classmethod
    def of(cls, diagnosis: Diagnosis) -> DoctorReport:
        """The same diagnosis, as a report."""
        return cls(**{f.name: getattr(diagnosis, f.name) for f in dataclasses.fields(diagnosis) if f.init})

    def print(self, file=None) -> None:
        from pitstop.report.doctor_terminal import render

        render(self, file=file)

    def html(self, path) -> None:
        from pitstop.report.doctor_html import doctor_html

        Path(path).write_text(doctor_html(self), encoding="utf-8")
