"""Memory measurements: parameters, gradients, optimizer state, activations, peak, leaks.

:class:`MemoryRecorder` is the recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`
that takes them while the script runs (the functions here measure; collect.py sums up).

Device-agnostic where possible: activations are the bytes of the tensors autograd saves for
backward (``torch.autograd.graph.saved_tensors_hooks``), counted once per storage and
without the parameters themselves; retained graphs are found by counting the autograd
nodes reachable from live tensors (``gc``), which works on CPU and CUDA alike. The peak is
the CUDA allocator's ``max_memory_allocated`` on GPU and the process's peak RSS on CPU.
"""

from __future__ import annotations

import gc
import os
import resource
import weakref
from collections.abc import Iterable
from typing import Any

from pitstop.doctor.record.patching import compiling_check

__all__ = [
    "ACTIVATION_STEPS", "storage_key", "unique_bytes", "param_bytes", "grad_bytes", "state_bytes", "rss_bytes",
    "peak_rss_bytes", "capacity_bytes", "graph_nodes", "MemoryRecorder",
]


def _local(t):
    """A ``DTensor``'s shard on this rank (FSDP2 parameters, gradients, optimizer state), else ``t``."""
    return getattr(t, "_local_tensor", t)


def storage_key(t) -> tuple[int, int] | None:
    """(device index-ish, data pointer) of a tensor's storage (a ``DTensor``'s local shard), or None when it has none."""
    t = _local(t)
    try:
        st = t.untyped_storage()
        return (hash(t.device), st.data_ptr())
    except Exception:
        return None


def unique_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view is not counted twice)."""
    seen: dict[tuple[int, int], int] = {}
    for t in tensors:
        t = _local(t)
        key = storage_key(t)
        if key is None:
            continue
        try:
            seen[key] = t.untyped_storage().nbytes()
        except Exception:
            continue
    return sum(seen.values())


def param_bytes(params: Iterable[Any]) -> int:
    return unique_bytes(params)


def grad_bytes(params: Iterable[Any]) -> int:
    return unique_bytes(p.grad for p in params if getattr(p, "grad", None) is not None)


def state_bytes(optimizer) -> int:
    import torch

    return unique_bytes(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))


def rss_bytes() -> int | None:
    """Resident set size of this process now (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def capacity_bytes(device: str) -> int | None:
    if device == "cuda":
        from pitstop.gpu import cuda_device

        return cuda_device().total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def graph_nodes(limit: int = 500_000) -> int:
    """Autograd nodes reachable from every live tensor that has a ``grad_fn``.

    A training loop holds a constant number of these (the current step's graph); a loop
    that keeps losses (``losses.append(loss)``, ``total += loss``) holds more each step.
    """
    import warnings

    import torch

    gc.collect()  # garbage awaiting collection is not retained
    with warnings.catch_warnings():  # isinstance() on deprecated module objects warns
        warnings.simplefilter("ignore")
        roots = [fn for o in gc.get_objects() if isinstance(o, torch.Tensor) and (fn := _grad_fn(o)) is not None]
    from pitstop.doctor.record.graph_calls import autograd_nodes

    return sum(1 for _ in autograd_nodes(roots, limit))


def _grad_fn(t: Any) -> Any:
    """``t.grad_fn``, or None where reading it raises (a view whose base was modified in place
    by a function that returns several views: FSDP1's flat-parameter views)."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


#: observed steps whose saved tensors are counted (the pack hook is off in the others)
ACTIVATION_STEPS = 2


class MemoryRecorder:
    """Memory while the script runs (full mode).

    - activations: the saved-tensor pack hook adds up the bytes autograd saves per step
      (each storage once, parameters excluded) in the first :data:`ACTIVATION_STEPS` observed
      steps (a Python call per saved tensor: ~100 us of the bundled MLP's 5 ms step, so not in
      every step); ``activations`` has one total per such step;
    - ``grad_bytes``: gradient bytes of the primary optimizer's parameters at its last observed step;
    - on CUDA, ``phase_peaks``: the allocator's peak within each phase (reset at its start;
      no sync), and ``run_peak`` the highest seen;
    - ``graph``: live autograd nodes counted after the first, middle and last observed
      step, and how many of the losses of earlier steps are still alive at the last one.

    ``log`` is the step clock; ``backward`` (set at :meth:`install`) says whether a
    backward runs now (autograd packs with grad mode off then: not the forward's saves).
    ``watch`` (:class:`~pitstop.doctor.record.oom.watch.MemWatch`, made at :meth:`install`) sees
    every saved tensor with the module that saved it, and profiles one step's memory."""

    def __init__(self, log: Any, *, cuda: bool) -> None:
        self.log, self.cuda = log, cuda
        self.activations: list[int] = []
        self.grad_bytes: int | None = None
        self.phase_peaks: dict[str, int] = {}
        self.run_peak = 0
        self.graph: dict[str, Any] = {}
        self.loss_refs: list[weakref.ref] = []
        #: observed steps after which the live autograd graph is counted (first, middle, last)
        self.census_at = {1, (log.steps + 1) // 2, log.steps}
        self._acts: dict[tuple[int, int], int] = {}
        self._param_keys: set[tuple[int, int]] = set()
        self._saved_hooks: Any = None
        self._compiled = False  # the script compiles: the pack hook is kept out of dynamo
        self._compiling = compiling_check()
        self.backward: Any = None
        self.watch: Any = None

    def install(self, backward: Any) -> None:
        """The saved-tensor pack hook (again, after a quiet step; once: installed, it stays)."""
        import torch

        self.backward = backward
        if self.watch is None:
            from pitstop.doctor.record.oom.watch import MemWatch

            warmup = dict(self.log.plan).get("warmup", 0)
            self.watch = MemWatch(self.log, backward, cuda=self.cuda, profile_at=warmup - 1 if warmup else None)
            self.watch.install()
        if self._saved_hooks is not None:
            return
        pack, unpack = self._pack, self._unpack
        if self._compiled:
            pack, unpack = torch.compiler.disable(pack), torch.compiler.disable(unpack)
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
        self._saved_hooks.__enter__()

    def compiled_code(self) -> None:
        """The script compiles: autograd also calls the pack hook from compiled code, where
        dynamo would compile it as a frame of its own; from now on it is wrapped in
        ``torch.compiler.disable`` (about 3 us more per saved tensor, so only then)."""
        import torch

        if self._compiled or not hasattr(torch, "compiler"):
            return
        self._compiled = True
        if self.watch is not None:
            self.watch.skip_profile("the script compiles (a dispatch mode around compiled code would recompile it)")
        if self._saved_hooks is not None:
            self.uninstall(watch=False)
            self.install(self.backward)

    def uninstall(self, *, watch: bool = True, keep_hooks: bool = True) -> None:
        """Remove the saved-tensor hooks and stop the watch (``keep_hooks``: its global forward
        hooks stay, inert, until :meth:`release` or an uninstall without it: compiled graphs
        guard on them, so removing them mid-run, before the profiled GPU steps, would recompile)."""
        if watch and self.watch is not None:
            self.watch.uninstall(keep_hooks=keep_hooks)
        if self._saved_hooks is not None:
            try:
                self._saved_hooks.__exit__(None, None, None)
            except Exception:
                pass
            self._saved_hooks = None

    def _pack(self, t):
        """Count the bytes autograd saves; return a detached alias (same storage, no copy).
        Returning ``t`` itself would make a saved *output* reference its own ``grad_fn``: a
        cycle that leaks every graph that is never back-propagated (eval with grad on)."""
        if self._compiling():  # AOTAutograd's own saved tensors: not the doctor's to count
            return t
        if not self.log.quiet and not self.backward.in_backward:
            key = storage_key(t)
            if key is not None and key not in self._param_keys and key not in self._acts:
                try:
                    self._acts[key] = t.untyped_storage().nbytes()
                except Exception:
                    pass
        alias = t.detach()
        if self.watch is not None:
            self.watch.packed(t, alias)
        return alias

    def _unpack(self, t: Any) -> Any:
        if self.watch is not None:
            self.watch.unpacked(t)
        return t

    def release(self) -> None:
        """Remove the forward hooks :meth:`uninstall` kept."""
        if self.watch is not None:
            self.watch.uninstall()

    def add_params(self, module) -> None:
        """A model's parameters are not activations."""
        self._param_keys.update(k for p in module.parameters() if (k := storage_key(p)) is not None)

    def watch_loss(self, t) -> None:
        self.loss_refs.append(weakref.ref(t))

    def take_grad_bytes(self, opt) -> None:
        self.grad_bytes = grad_bytes(p for g in opt.param_groups for p in g["params"])

    def phase(self, phase: str, start: bool) -> None:
        """On CUDA, at the start and end of a phase of an observed step: its peak."""
        import torch

        if not (self.cuda and torch.cuda.is_initialized()) or self.log.kind() != "observed":
            return
        if start:
            self.run_peak = max(self.run_peak, torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        else:
            peak = torch.cuda.max_memory_allocated()
            self.run_peak = max(self.run_peak, peak)
            self.phase_peaks[phase] = max(self.phase_peaks.get(phase, 0), peak)

    def now(self) -> int | None:
        """Bytes in use now: CUDA allocated, or the process's RSS."""
        import torch

        if self.cuda and torch.cuda.is_initialized():
            return int(torch.cuda.memory_allocated())
        return rss_bytes()

    def end_step(self, kind: str) -> None:
        """The step ends: its activations (observed steps) and a fresh count for the next."""
        if self.watch is not None:
            self.watch.end_step(kind)
        if kind == "observed" and self._acts:
            self.activations.append(sum(self._acts.values()))
        self._acts = {}

    def census(self, observed: int, index: int) -> None:
        """After ``observed`` observed steps (``index`` records): count the live graph."""
        if observed not in self.census_at:
            return
        self.graph.setdefault("nodes", []).append(graph_nodes())
        self.graph.setdefault("steps", []).append(index)
        if observed == self.log.steps:
            prior = self.loss_refs[:-1]
            self.graph["live_losses"] = sum(1 for r in prior if r() is not None)
            self.graph["losses_tracked"] = len(prior)
