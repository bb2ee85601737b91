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

from typing import Any

__all__ = ["verdict", "DEFAULT_MARGIN", "DEFAULT_CONFIDENCE"]

DEFAULT_MARGIN = 0.05
DEFAULT_CONFIDENCE = 0.9


def verdict(decision: Any, margin: float = DEFAULT_MARGIN) -> tuple[str, str]:
    """``(status, reason)`` from a :class:`pitstop.paired.Decision` (None: nothing measured)."""
    if decision is None:
        return "no_gain", "no steps measured"
    on = f"{decision.measure.name} time" if decision.measure.name != "gpu" else "CUDA event time"
    counts = f"faster in {decision.won}/{decision.pairs} pairs, on {on}"
    bar = 1 + margin
    if decision.status == "faster":
        return "kept", f"interval above {bar:.2f}x; {counts}"
    if decision.status == "slower":
        return "slower", f"interval below 1/{bar:.2f}; {counts}"
    if decision.status == "same":
        return "no_gain", f"interval cannot reach {bar:.2f}x; {counts}"
    if decision.status == "close":
        return "no_gain", (f"on the {bar:.2f}x bar: at most {decision.high:.2f}x, too close to it to be worth keeping; "
                           f"{counts}")
    return "no_gain", f"undecided after {decision.pairs} pairs (interval spans {bar:.2f}x); {counts}"
