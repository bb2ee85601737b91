"""A trial's speed verdict from its paired comparison with the baseline (torch-free).

The comparison itself is :mod:`pitstop.paired` (shared with the doctor's probes): every
trial run is next to a baseline run; the ratio of the baseline's typical step to the
trial's is one *pair*; the interval is over pairs.
The machine's noise is in that interval: there is no second bar from the baseline's own
spread on top of it. The clock decided on (wall, CPU time of the process and its workers,
or CUDA event time) is chosen from the load the runs observed and shown with the verdict.

- **kept**: the interval lies above ``1 + margin`` (and the loss trajectory is equivalent);
- **slower**: it lies below ``1 / (1 + margin)``;
- **no gain**: it cannot reach ``1 + margin`` any more, or it was still undecided when the
  pairs (``max_pairs``) or the budget ran out. Normal and honest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from pitstop.paired import Decision, DecisionStatus

__all__ = ["verdict", "VERDICT_OF", "DEFAULT_MARGIN", "DEFAULT_CONFIDENCE", "TrialStatus", "STATUSES"]

#: Verdicts of a trial. ``kept``: faster beyond the noise and equivalent; ``no_gain``: not
#: measurably faster (an honest, normal result); ``slower``: measurably slower;
#: ``rejected``: the loss trajectory is not equivalent (diverged, NaN); ``failed``: a run
#: crashed, hung (timeout), ran out of memory, or its setup failed; ``not_applicable``: the
#: knob cannot change this training (with the reason); ``skipped``: not measured (budget,
#: conflict with a kept trick).
TrialStatus = Literal["kept", "no_gain", "slower", "rejected", "failed", "not_applicable", "skipped"]
STATUSES: tuple[TrialStatus, ...] = get_args(TrialStatus)

DEFAULT_MARGIN = 0.05
DEFAULT_CONFIDENCE = 0.9


#: The trial status each paired decision gives (before the loss check, which can reject a ``kept``).
VERDICT_OF: dict[DecisionStatus, TrialStatus] = {
    "faster": "kept", "slower": "slower", "same": "no_gain", "close": "no_gain", "undecided": "no_gain"}


def verdict(decision: Decision | None, margin: float = DEFAULT_MARGIN) -> tuple[TrialStatus, str]:
    """``(status, reason)`` from a :class:`pitstop.paired.Decision` (None: nothing measured)."""
    if decision is None:
        return "no_gain", "no steps measured"
    on = f"{decision.measure.name} time" if decision.measure.name != "gpu" else "CUDA event time"
    counts = f"faster in {decision.won}/{decision.pairs} pairs, on {on}"
    bar = 1 + margin
    why = {"faster": f"interval above {bar:.2f}x",
           "slower": f"interval below 1/{bar:.2f}",
           "same": f"interval cannot reach {bar:.2f}x",
           "close": f"on the {bar:.2f}x bar: at most {decision.high:.2f}x, too close to it to be worth keeping",
           "undecided": f"undecided after {decision.pairs} pairs (interval spans {bar:.2f}x)"}
    return VERDICT_OF[decision.status], f"{why[decision.status]}; {counts}"
