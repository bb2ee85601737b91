"""Why a trial came out as it did, in its knob's own terms (torch-free).

A knob may say what its trial runs showed beyond their speed (:meth:`Knob.explain`): the
compile knob names the graph breaks and recompiles dynamo reported in the trial's runs. The
tuner appends that text to the trial's verdict and, when the knob vetoes the value (a compiled
function that hit dynamo's recompile limit runs eagerly: keeping it would keep nothing), the
trial is rejected whatever its speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Explanation", "explain_trial"]


@dataclass(frozen=True)
class Explanation:
    """``text``: facts of the trial's runs, for its verdict; ``veto``: why the value must not
    be kept (None: the speed decides)."""

    text: str
    veto: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "veto": self.veto}


def explain_trial(trial: Any, knob_of: Any) -> None:
    """Ask each knob of ``trial`` (``knob_of(setting)`` -> Knob) to explain its runs; set
    ``trial.explanation`` and reject a vetoed trial."""
    runs = [r for r in trial.runs if getattr(r, "compile", None) is not None]
    texts = []
    for setting in trial.settings:
        ex = knob_of(setting).explain(setting.value, [r.compile for r in runs], trial)
        if ex is None:
            continue
        texts.append(ex.text)
        if ex.veto and trial.status == "kept":
            trial.status, trial.reason = "rejected", f"{ex.veto}; {trial.reason}"
    trial.explanation = "; ".join(t for t in texts if t) or None
