"""Counting host-device syncs by call site (PIT201, PIT203, PIT405 observations).

``Tensor.item/.cpu/.numpy/.tolist`` and ``float()/int()/bool()`` of a tensor make the host
wait for the device; ``torch.cuda.synchronize`` waits for everything. Each wrapper times the
call and reports the user's source line to :class:`SyncRecorder`, which decides whether the
call counts (not inside data loading, an optimizer step, or torch's own code) and counts
it per step and per call site. It also counts host-to-device copies (``Tensor.to``, CUDA only). On CUDA,
``torch.cuda.set_sync_debug_mode("warn")`` additionally reports syncs hidden inside ops
(``nonzero``, boolean masks, ...), caught from the warnings it emits.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from typing import Any, Callable

from pitstop.doctor.record.patching import Patches, as_method, compiling_check, site_via, user_site
from pitstop.doctor.record.steps import StepLog

__all__ = ["install_sync_patches", "SyncRecorder", "SyncDebug", "TENSOR_SYNCS", "own_site", "OWN_DIR"]

#: Tensor methods that copy a value to the host (a sync on CUDA), by report name.
TENSOR_SYNCS = {"item": "item", "cpu": "cpu", "numpy": "numpy", "tolist": "tolist",
                "__float__": "float", "__int__": "int", "__bool__": "bool"}
#: torch.cuda functions counted per call site, by report name.
CUDA_CALLS = {"synchronize": "cuda.synchronize", "empty_cache": "cuda.empty_cache",
              "reset_max_memory_allocated": "cuda.reset_max_memory_allocated"}

perf = time.perf_counter
#: the doctor's own package: a sync reported from a file under it is the doctor's (a wrapper
#: that already counted the call at the user's line), never the script's (pitstop's bundled
#: example scripts are scripts like any other)
OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def own_site(site: str) -> bool:
    """``site`` ("file:line") is a line of the doctor itself."""
    return os.path.abspath(site.rsplit(":", 1)[0]).startswith(OWN_DIR)


def _wrap_method(original: Callable, kind: str, report: Callable[..., None], log: StepLog,
                 counts: Callable[[], bool] = lambda: True) -> Callable:
    compiling = compiling_check()

    def wrapper(self, *args: Any, **kwargs: Any):
        # traced by dynamo (first: dynamo then reads no state of the doctor, so guards none), a
        # quiet step, or a call that cannot count (inside a DataLoader fetch or an optimizer step:
        # Adam reads its step counters with .item()): the original op, as if unpatched
        if compiling() or log.quiet or not counts():
            return original(self, *args, **kwargs)
        t0 = perf()
        try:
            return original(self, *args, **kwargs)
        finally:
            found = site_via(2)
            if found is not None:
                report(kind, found[0], perf() - t0, found[1])

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(original, "__name__", kind)
    return wrapper


def _wrap_function(original: Callable, kind: str, report: Callable[[str, str, float], None], log: StepLog,
                   counts: Callable[[], bool] = lambda: True) -> Callable:
    compiling = compiling_check()

    def wrapper(*args: Any, **kwargs: Any):
        if compiling() or log.quiet or not counts():
            return original(*args, **kwargs)
        t0 = perf()
        try:
            return original(*args, **kwargs)
        finally:
            site = user_site(2, through_torch=False) or "<torch internals>"
            report(kind, site, perf() - t0)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def install_sync_patches(patches: Patches, report_sync: Callable[..., None],
                         report_cuda_call: Callable[[str, str, float], None], log: StepLog,
                         counts_sync: Callable[[], bool] = lambda: True,
                         counts_call: Callable[[], bool] = lambda: True) -> SyncDebug | None:
    """Patch the sync points (each returns the original at once while ``log.quiet`` or while its
    ``counts_*`` says a call would not count); return the CUDA sync-debug mode's switch (or None)."""
    import torch

    for attr, kind in TENSOR_SYNCS.items():
        original = getattr(torch.Tensor, attr)
        patches.set(torch.Tensor, attr, _wrap_method(original, kind, report_sync, log, counts_sync))
    for attr, kind in CUDA_CALLS.items():
        fn = getattr(torch.cuda, attr, None)
        if fn is not None:
            patches.set(torch.cuda, attr, _wrap_function(fn, kind, report_cuda_call, log, counts_call))
    if not torch.cuda.is_available():
        return None
    return _install_sync_debug(report_sync)


class SyncDebug:
    """On CUDA: ``torch.cuda.set_sync_debug_mode("warn")`` on every synchronizing op, the
    warnings counted by their source line; :meth:`quiet` turns the mode back to the script's
    own for the quiet steps (``StepLog.quiet``) and on again after them."""

    def __init__(self, report_sync: Callable[..., None]) -> None:
        import torch

        self.previous_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        self.previous_show = warnings.showwarning
        previous_show = self.previous_show

        def showwarning(message, category, filename, lineno, file=None, line=None):
            if "synchroniz" in str(message).lower():
                if not own_site(f"{filename}:{lineno}"):  # the wrappers' own calls: counted at the user's line
                    report_sync("sync-debug", f"{filename}:{lineno}", 0.0)
                return
            previous_show(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning
        self.ctx = warnings.catch_warnings()
        self.ctx.__enter__()
        warnings.simplefilter("always", UserWarning)

    def quiet(self, on: bool) -> None:
        import torch

        try:
            torch.cuda.set_sync_debug_mode(self.previous_mode if on else "warn")
        except Exception:  # pragma: no cover - depends on the CUDA build
            pass

    def __call__(self) -> None:
        """Uninstall."""
        self.ctx.__exit__(None, None, None)
        warnings.showwarning = self.previous_show
        self.quiet(True)


def _install_sync_debug(report_sync: Callable[..., None]) -> SyncDebug | None:
    try:
        return SyncDebug(report_sync)
    except Exception:  # pragma: no cover - depends on the CUDA build
        return None


class SyncRecorder:
    """Syncs, CUDA calls and host-to-device copies: per step, folded per call site over the
    observed steps. ``sites``/``cuda_sites``: ``(site, kind) -> [calls, steps with calls,
    seconds]``; ``h2d``: copies by ``blocking``/``non_blocking`` and their ``seconds``.
    A sync is not the script's while ``loaders.busy`` (a DataLoader fetches) or
    ``bounds.in_opt`` (inside an optimizer step, outside its closure)."""

    def __init__(self, log: StepLog, loaders: Any, bounds: Any) -> None:
        self.log, self.loaders, self.bounds = log, loaders, bounds
        self.sites: dict[tuple[str, str], list[float]] = {}
        self.cuda_sites: dict[tuple[str, str], list[float]] = {}
        self.h2d: Counter[str] = Counter()
        #: site -> the user's line that leads there, for syncs a framework made (``trainer.train()``)
        self.via: dict[str, str] = {}
        self.step_syncs: Counter[tuple[str, str]] = Counter()
        self.step_sync_s: Counter[tuple[str, str]] = Counter()
        self.step_cuda: Counter[tuple[str, str]] = Counter()
        self.step_cuda_s: Counter[tuple[str, str]] = Counter()
        self.step_h2d: Counter[str] = Counter()
        self._debug_off: SyncDebug | None = None
        self._orig_to: Any = None
        self._compiling = compiling_check()

    def new_step(self) -> None:
        for table in (self.step_syncs, self.step_sync_s, self.step_cuda, self.step_cuda_s, self.step_h2d):
            table.clear()

    def install(self, patches: Patches) -> None:
        import torch

        loaders, bounds = self.loaders, self.bounds
        self._debug_off = install_sync_patches(patches, self.on_sync, self.on_cuda_call, self.log,
                                               lambda: not (loaders.busy or bounds.in_opt), lambda: not bounds.in_opt)
        if torch.cuda.is_available():
            self._orig_to = patches.set(torch.Tensor, "to", as_method(self._tensor_to))

    def quiet(self, on: bool) -> None:
        """The next step is quiet (``on``) or not: the CUDA sync-debug mode follows."""
        if self._debug_off is not None:
            self._debug_off.quiet(on)

    def uninstall(self) -> None:
        if self._debug_off is not None:
            self._debug_off()
            self._debug_off = None

    def on_sync(self, kind: str, site: str, seconds: float, via: str | None = None) -> None:
        if self.log.passive or self.loaders.busy or self.bounds.in_opt or own_site(site):
            return
        if via is not None:
            self.via[site] = via
        self.step_syncs[(site, kind)] += 1
        self.step_sync_s[(site, kind)] += seconds
        self.log.cur.phases["sync"] += seconds

    def on_cuda_call(self, kind: str, site: str, seconds: float) -> None:
        if self.log.passive or self.bounds.in_opt or own_site(site):
            return
        self.step_cuda[(site, kind)] += 1
        self.step_cuda_s[(site, kind)] += seconds
        if kind == "cuda.synchronize":
            self.on_sync(kind, site, seconds)

    def _tensor_to(self, t, *args, **kwargs):
        if self._compiling() or self.log.quiet:
            return self._orig_to(t, *args, **kwargs)
        t0 = perf()
        out = self._orig_to(t, *args, **kwargs)
        if not self.log.passive and out is not t and t.device.type == "cpu" and out.device.type == "cuda":
            self.step_h2d["non_blocking" if kwargs.get("non_blocking") else "blocking"] += 1
            self.step_h2d["seconds"] += perf() - t0
        return out

    def fold(self) -> None:
        """An observed step ends: add its counts to the per-site tables."""
        for key, n in self.step_syncs.items():
            entry = self.sites.setdefault(key, [0, 0, 0.0])
            entry[0] += n
            entry[1] += 1
            entry[2] += self.step_sync_s[key]
        for key, n in self.step_cuda.items():
            entry = self.cuda_sites.setdefault(key, [0, 0, 0.0])
            entry[0] += n
            entry[1] += 1
            entry[2] += self.step_cuda_s[key]  # the seconds PIT203's live evidence gives (they were 0)
        self.h2d.update(self.step_h2d)
