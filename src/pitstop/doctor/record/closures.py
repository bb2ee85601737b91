"""Optimizer steps that run forward and backward themselves, and the first-step hook.

``optimizer.step(closure)`` (LBFGS in a plain loop; every Lightning ``Trainer`` with
automatic optimization) calls the closure *inside* the step: forward, loss and backward run
between the optimizer's pre and post hooks. :func:`wrap_closure` (returned from the global
step pre-hook, which may replace the step's arguments) times the closure, so the optimizer
phase is the step minus its closure, and lets syncs inside the closure count as the
script's (they are the user's ``training_step``, not the optimizer's own code). Shares of
the breakdown then sum to one step again.

:func:`on_first_step` runs once, at the primary optimizer's first step: framework
detection (:mod:`pitstop.doctor.record.frameworks`), and for a Lightning ``Trainer`` the tracking
of ``self.log(..., prog_bar=True)`` call sites.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from pitstop.doctor.record import frameworks

__all__ = ["wrap_closure", "on_first_step"]

perf = time.perf_counter


def wrap_closure(opt: Any, args: tuple, kwargs: dict, enter: Callable[[], None],
                 leave: Callable[[int, float], None]) -> tuple[tuple, dict] | None:
    """New ``(args, kwargs)`` with the closure timed, or None when the step has no closure.
    ``enter()`` runs as the closure starts, ``leave(id(opt), seconds)`` as it ends."""
    if "closure" in kwargs and callable(kwargs["closure"]):
        closure, where = kwargs["closure"], "kw"
    elif len(args) > 1 and args[0] is opt and callable(args[1]):  # (self, closure): the hook sees self
        closure, where = args[1], "pos"
    else:
        return None
    key = id(opt)

    def timed_closure(*a: Any, **k: Any) -> Any:
        enter()
        t0 = perf()
        try:
            return closure(*a, **k)
        finally:
            leave(key, perf() - t0)

    timed_closure.__wrapped__ = closure  # type: ignore[attr-defined]
    if where == "kw":
        return args, {**kwargs, "closure": timed_closure}
    return (args[0], timed_closure, *args[2:]), kwargs


def on_first_step(opt: Any, *, notes: list[str], patches: Any, full: bool) -> Any:
    """Detect the framework driving the script (and prepare framework-specific attribution).
    Called from the optimizer step pre-hook: the frame two up is the optimizer's caller."""
    try:
        info = frameworks.detect(sys._getframe(2), optimizer=opt)
    except Exception as exc:  # never break the user's step over a report detail
        notes.append(f"framework detection failed: {type(exc).__name__}: {exc}")
        return None
    if info.name == "lightning" and full:
        from pitstop.doctor.record.patching import user_site

        frameworks.track_lightning_logs(patches, lambda depth: user_site(depth + 1))
    return info
