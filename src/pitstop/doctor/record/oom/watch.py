"""Where memory goes inside a step: which module saved what for backward, and one step followed storage by storage.

:class:`MemWatch` is part of the memory recorder (``doctor/record/memory.py`` owns it and
calls it from its saved-tensor hook); it keeps:

- the **module stack**: global forward pre/post hooks push and pop the running modules' names
  (qualified names in the outermost model). A forward that raises leaves its stack as it
  was, so an out-of-memory error in a forward is found where it happened;
- **saved tensors by module**: every tensor autograd saves in a step is noted with the module
  whose forward saved it (a weak reference to what autograd keeps, so what is still alive
  at a failure is known); when the backward reads a saved tensor back, its module is the
  one being back-propagated (``last_unpacked``);
- **the profiled memory step**: the last warmup step (or the first step with ``--warmup 0``:
  none, said in a note) runs under :class:`~pitstop.doctor.record.oom.ledger.StorageLedger`,
  entered at the step's first training forward and left at its end: its peak, what the peak
  was made of, the optimizer step's own peak, the activations each repeated block saved and
  how much of that were its inputs (:class:`~pitstop.doctor.analysis.oom_records.MemoryProfile`);
- the **repeated blocks' forward time** in observed steps (what recomputing them costs);
- on CUDA, the allocator's own history (``torch.cuda.memory._record_memory_history``, Python
  stacks of live blocks), enabled at the first training forward, read at a failure.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import torch

from pitstop.doctor.analysis.oom_records import BlockBytes, MemoryProfile, ModuleBytes
from pitstop.doctor.record.oom.blocks import block_items
from pitstop.doctor.record.oom.ledger import LEDGER_SOURCE, OUTSIDE, StorageLedger
from pitstop.doctor.record.patching import compiling_check

__all__ = ["MemWatch", "storage_of", "HISTORY_ENTRIES"]

#: allocation records the CUDA allocator's history keeps (its ring buffer)
HISTORY_ENTRIES = 100_000


def storage_of(t: Any) -> tuple[str, int] | None:
    """(device, data pointer) of a tensor's storage: the key of the ledger and of the saved map."""
    try:
        return (str(t.device), t.untyped_storage().data_ptr())
    except Exception:
        return None


class MemWatch:
    """See the module docstring. ``log`` is the step clock, ``bounds`` the step boundaries
    (backward / optimizer in progress, the optimizers seen)."""

    def __init__(self, log: Any, bounds: Any, *, cuda: bool, profile_at: int | None) -> None:
        self.log, self.bounds, self.cuda = log, bounds, cuda
        self.profile_at = profile_at
        self.stack: list[tuple[Any, str]] = []  # (module, its name) of the forwards running now
        self.names: dict[int, str] = {}          # id(module) -> qualified name in its outermost model
        self.roots: dict[int, Any] = {}          # id -> weak reference of the outermost models seen
        self.block_of: dict[int, str] = {}       # id(block) -> its name
        self.blocks_pattern = ""
        #: storage key -> (weak reference to what autograd keeps, module), this step
        self.saved: dict[tuple[str, int], tuple[Any, str]] = {}
        self.last_unpacked: str | None = None
        #: samples of the last training forward of an outermost model (dim 0 of its first tensor)
        self.batch: int | None = None
        self.block_seconds: dict[str, float] = {}
        self._block_t0: dict[int, float] = {}
        self.ledger: StorageLedger | None = None
        self.profile: MemoryProfile | None = None
        self.profile_notes: list[str] = []
        self._forwards = 0
        self._block_inputs: dict[str, set] = {}
        self._block_saved: dict[str, list[int]] = {}
        self._module_saved: dict[str, int] = {}
        self._block_cache: dict[str, str | None] = {}
        self._allocator_reset = False
        self.history: str = "" if cuda else "the CUDA allocator's history needs a CUDA run"
        self._handles: list[Any] = []
        self.inert = False  # uninstalled: the hooks kept for compiled graphs do nothing
        self._compiling = compiling_check()

    # -- install -----------------------------------------------------------------------------
    def install(self) -> None:
        from torch.nn.modules import module as module_mod

        self.inert = False
        self._handles = [module_mod.register_module_forward_pre_hook(self._pre),
                         module_mod.register_module_forward_hook(self._post)]

    def uninstall(self, *, keep_hooks: bool = False) -> None:
        """Remove the hooks (``keep_hooks``: the global forward hooks stay, inert, for compiled
        graphs that guard on them; a later call removes them)."""
        self.inert = True
        if not keep_hooks:
            for h in self._handles:
                h.remove()
            self._handles = []
        self._leave_ledger()
        if self.history == "recorded":  # the allocator records for the doctor only while it watches
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:
                pass
            self.history = "recorded, stopped"

    def skip_profile(self, reason: str) -> None:
        """No profiled memory step in this run (``reason`` goes in the notes)."""
        if self.profile_at is not None and self.profile is None and self.ledger is None:
            self.profile_at = None
            self.profile_notes.append(f"no memory profile: {reason}")

    def phase(self) -> str:
        """forward, backward, optimizer or other, now."""
        b = self.bounds
        if b is not None and b.in_backward:
            return "backward"
        if b is not None and b.in_opt:
            return "optimizer"
        return "forward" if self.stack else "other"

    def current(self) -> str | None:
        return self.stack[-1][1] if self.stack else None

    def where(self) -> str:
        """The module at work now: the innermost forward running, or in backward the module whose
        saved tensors the backward read last; OUTSIDE for none."""
        if self.stack:
            return self.stack[-1][1]
        if self.bounds is not None and self.bounds.in_backward and self.last_unpacked:
            return self.last_unpacked
        return OUTSIDE

    # -- forward hooks -------------------------------------------------------------------------
    def _pre(self, module: Any, args: Any) -> None:
        if self._compiling() or self.inert or self.log.quiet:  # quiet: bare and traced steps time no hook
            return
        key = id(module)
        if key in self.roots or not self.stack:
            if self.stack:
                self.stack.clear()  # a forward that raised left its frames: a new forward starts
            self._root(module, args)
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = type(module).__name__
        self.stack.append((module, name))
        block = self.block_of.get(key)
        if block is not None:
            self._block_t0[key] = time.perf_counter()
            if self.ledger is not None:
                self._block_inputs.setdefault(block, set()).update(
                    k for t in _tensors(args) if (k := storage_of(t)) is not None)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self._compiling() or self.inert or self.log.quiet:  # quiet: bare and traced steps time no hook
            return
        st = self.stack
        while st and st[-1][0] is not module:  # frames an exception unwound without their hooks
            st.pop()
        if st:
            st.pop()
        key = id(module)
        t0 = self._block_t0.pop(key, None)
        if t0 is not None and self.log.kind() == "observed" and not self.log.passive:
            name = self.block_of[key]
            self.block_seconds[name] = self.block_seconds.get(name, 0.0) + time.perf_counter() - t0

    def _root(self, module: Any, args: Any) -> None:
        """An outermost forward starts: its names and blocks (once), the profiled step."""
        key = id(module)
        if key not in self.roots:
            self.roots[key] = weakref.ref(module)
            for name, m in module.named_modules():
                self.names.setdefault(id(m), name or type(module).__name__)
            pattern, items = block_items(module)
            if pattern and not self.block_of:
                self.blocks_pattern = pattern
                self.block_of.update({id(m): name for name, m in items})
            if self.cuda and not self.history:
                self._record_history()
        if torch.is_grad_enabled() and not (self.bounds is not None and self.bounds.in_backward):
            first = next(iter(_tensors(args)), None)
            if first is not None and first.dim():
                self.batch = int(first.shape[0])
        if (torch.is_grad_enabled() and not self.log.passive and self.log.index == self.profile_at
                and self.bounds is not None and not self.bounds.in_backward):
            self._forwards += 1
            if self.ledger is None and _compiled(module):
                self.skip_profile("the model is torch.compile'd (a dispatch mode around compiled code would recompile it)")
            elif self.ledger is None and _sharded(module):
                self.skip_profile("the model is sharded (DTensor parameters, FSDP): its parameters are gathered and "
                                  "freed inside the step, and each rank's part is counted by the sharding recorder")
            elif self.ledger is None:
                try:
                    self._enter_ledger(module, args)
                except Exception as exc:  # the doctor's own measurement never fails the user's step
                    self.ledger = None
                    self.skip_profile(f"the memory step could not follow this model's storages "
                                      f"({type(exc).__name__}: {str(exc)[:120]})")

    # -- saved tensors -----------------------------------------------------------------------
    def packed(self, t: Any, alias: Any) -> None:
        """Autograd saves ``t`` (kept as ``alias``) for backward."""
        if t.is_leaf and t.requires_grad:  # a parameter: not an activation
            return
        key = storage_of(t)
        if key is None or key in self.saved:
            return
        name = self.stack[-1][1] if self.stack else OUTSIDE
        self.saved[key] = (weakref.ref(alias), name)
        if self.ledger is not None:
            self.ledger.saved(t, name)
            entry = self.ledger.entry(t)
            if entry is not None and entry.category == "activation":
                self._module_saved[name] = self._module_saved.get(name, 0) + entry.nbytes
                block = self._block_name(name)
                if block is not None:
                    acc = self._block_saved.setdefault(block, [0, 0])
                    acc[0] += entry.nbytes
                    if key in self._block_inputs.get(block, ()):
                        acc[1] += entry.nbytes

    def unpacked(self, alias: Any) -> None:
        """The backward reads a saved tensor: its module is the one being back-propagated."""
        got = self.saved.get(storage_of(alias))
        if got is not None:
            self.last_unpacked = got[1]

    def _block_name(self, name: str) -> str | None:
        """The block ``name`` is (or is inside), None outside every block."""
        cache = self._block_cache
        if name not in cache:
            cache[name] = next((b for b in self.block_of.values() if name == b or name.startswith(b + ".")), None)
        return cache[name]

    def alive_saved(self) -> dict[tuple[str, int], tuple[Any, str]]:
        """The saved tensors of this step still kept by autograd: key -> (tensor, module)."""
        out = {}
        for key, (ref, name) in list(self.saved.items()):
            t = ref()
            if t is not None:
                out[key] = (t, name)
        return out

    def end_step(self, kind: str) -> None:
        """The step ended: its saved map is dropped; the profiled step is read."""
        if self.ledger is not None:
            self._read_profile()
        self.saved = {}
        self.last_unpacked = None

    # -- the profiled step ---------------------------------------------------------------------
    def _enter_ledger(self, module: Any, args: Any) -> None:
        ledger = StorageLedger(phase=self.phase, where=self.where)
        ledger.track(module, *self.bounds.optimizers.values(), list(_tensors(args)))
        for key in list(self.saved):  # saved before this forward (a step of several forwards)
            t = self.saved[key][0]()
            if t is not None:
                ledger.saved(t, self.saved[key][1])
        if self.cuda and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
            self._allocator_reset = True
        self._block_inputs, self._block_saved, self._module_saved = {}, {}, {}
        ledger.__enter__()
        self.ledger = ledger

    def _leave_ledger(self) -> None:
        ledger, self.ledger = self.ledger, None
        if ledger is not None:
            try:
                ledger.__exit__(None, None, None)
            except Exception:
                pass
        return None

    def _read_profile(self) -> None:
        ledger = self.ledger
        self._leave_ledger()
        ledger.retag(self.bounds.optimizers.values())
        at_peak = ledger.parts()
        allocator_peak = None
        if self._allocator_reset and torch.cuda.is_initialized():
            allocator_peak = int(torch.cuda.max_memory_allocated())
        blocks = [BlockBytes(name=b, saved=v[0], input=v[1]) for b, v in self._block_saved.items()]
        self.profile = MemoryProfile(
            step=self.profile_at if self.profile_at is not None else -1, batch=0, micro_batches=max(1, self._forwards),
            peak=ledger.peak, peak_phase=ledger.peak_phase, at_peak=at_peak, moments=ledger.moment_parts(),
            optimizer_peak=ledger.phase_peaks.get("optimizer"), saved=sum(self._module_saved.values()),
            by_module=[ModuleBytes(module=k, bytes=v) for k, v in sorted(self._module_saved.items(), key=lambda kv: -kv[1])], blocks=blocks, blocks_pattern=self.blocks_pattern,
            allocator_peak=allocator_peak, device="cuda" if self.cuda and torch.cuda.is_initialized() else "cpu",
            source=LEDGER_SOURCE, notes=list(self.profile_notes),
            largest=ledger.largest.nbytes if ledger.largest is not None else 0,
            largest_category=ledger.largest.category if ledger.largest is not None else "")

    def result(self, *, samples: int | None, forwards: int | None, seconds_steps: int) -> MemoryProfile | None:
        """The profiled step's record, with its samples (from the batch record) and the blocks'
        forward seconds per observed step."""
        p = self.profile
        if p is None:
            return None
        from dataclasses import replace

        n = max(1, seconds_steps)
        blocks = [replace(b, seconds=self.block_seconds[b.name] / n if b.name in self.block_seconds else None)
                  for b in p.blocks]
        return replace(p, batch=samples or 0, micro_batches=forwards or p.micro_batches, blocks=blocks)

    # -- CUDA allocator history ------------------------------------------------------------------
    def _record_history(self) -> None:
        if not torch.cuda.is_initialized():
            return
        try:
            torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python",
                                                   max_entries=HISTORY_ENTRIES)
            self.history = "recorded"
        except Exception as exc:  # an older torch, or a build without it
            self.history = f"not available ({type(exc).__name__}: {exc})"


def _compiled(model: Any) -> bool:
    """The model, or a module inside it, runs compiled (``torch.compile(model)``, ``Module.compile()``)."""
    return any(type(m).__name__ == "OptimizedModule" or getattr(m, "_compiled_call_impl", None) is not None
               for m in model.modules())


def _sharded(model: Any) -> bool:
    """The model holds DTensor parameters (FSDP2, tensor parallel) or FSDP1's flat parameters."""
    return any(type(p).__name__ in ("DTensor", "FlatParameter") for p in model.parameters())


def _tensors(obj: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]
