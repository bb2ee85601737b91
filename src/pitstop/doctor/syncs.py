"""Counting host-device syncs by call site (PIT201, PIT203, PIT405 observations).

``Tensor.item/.cpu/.numpy/.tolist`` and ``float()/int()/bool()`` of a tensor make the host
wait for the device; ``torch.cuda.synchronize`` waits for everything. Each wrapper times the
call and reports the user's source line to the instrumentation, which decides whether the
call counts (not inside data loading, an optimizer step, or torch's own code). On CUDA,
``torch.cuda.set_sync_debug_mode("warn")`` additionally reports syncs hidden inside ops
(``nonzero``, boolean masks, ...), caught from the warnings it emits.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable

from pitstop.doctor.patching import Patches, user_site

__all__ = ["install_sync_patches", "TENSOR_SYNCS"]

#: Tensor methods that copy a value to the host (a sync on CUDA), by report name.
TENSOR_SYNCS = {"item": "item", "cpu": "cpu", "numpy": "numpy", "tolist": "tolist",
                "__float__": "float", "__int__": "int", "__bool__": "bool"}
#: torch.cuda functions counted per call site, by report name.
CUDA_CALLS = {"synchronize": "cuda.synchronize", "empty_cache": "cuda.empty_cache",
              "reset_max_memory_allocated": "cuda.reset_max_memory_allocated"}

perf = time.perf_counter


def _wrap_method(original: Callable, kind: str, report: Callable[[str, str, float], None]) -> Callable:
    def wrapper(self, *args: Any, **kwargs: Any):
        t0 = perf()
        try:
            return original(self, *args, **kwargs)
        finally:
            site = user_site(2)
            if site is not None:
                report(kind, site, perf() - t0)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", kind)
    return wrapper


def _wrap_function(original: Callable, kind: str, report: Callable[[str, str, float], None]) -> Callable:
    def wrapper(*args: Any, **kwargs: Any):
        t0 = perf()
        try:
            return original(*args, **kwargs)
        finally:
            site = user_site(2, through_torch=False) or "<torch internals>"
            report(kind, site, perf() - t0)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def install_sync_patches(patches: Patches, report_sync: Callable[[str, str, float], None],
                         report_cuda_call: Callable[[str, str, float], None]) -> Callable[[], None] | None:
    """Patch the sync points; return an uninstaller for the CUDA sync-debug mode (or None)."""
    import torch

    for attr, kind in TENSOR_SYNCS.items():
        original = getattr(torch.Tensor, attr)
        patches.set(torch.Tensor, attr, _wrap_method(original, kind, report_sync))
    for attr, kind in CUDA_CALLS.items():
        fn = getattr(torch.cuda, attr, None)
        if fn is not None:
            patches.set(torch.cuda, attr, _wrap_function(fn, kind, report_cuda_call))
    if not torch.cuda.is_available():
        return None
    return _install_sync_debug(report_sync)


def _install_sync_debug(report_sync: Callable[[str, str, float], None]) -> Callable[[], None] | None:
    """On CUDA: warn on every synchronizing op and count the warnings by their source line."""
    import torch

    try:
        previous_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
    except Exception:  # pragma: no cover - depends on the CUDA build
        return None
    previous_show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message).lower():
            report_sync("sync-debug", f"{filename}:{lineno}", 0.0)
            return
        previous_show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("always", UserWarning)

    def uninstall() -> None:
        ctx.__exit__(None, None, None)
        warnings.showwarning = previous_show
        try:
            torch.cuda.set_sync_debug_mode(previous_mode)
        except Exception:  # pragma: no cover
            pass

    return uninstall
