"""A tracked allocator: every tensor storage alive, its bytes and what it is, with an optional limit.

:class:`StorageLedger` is a ``TorchDispatchMode``: after every operation it registers the
storages of the outputs (once each, with a weak reference whose callback subtracts them when
the storage is freed), so ``total`` is the tensor bytes alive now and ``peak`` the most seen.
Storages that existed before the ledger was entered (parameters, gradients, optimizer state,
the batch) are registered with :meth:`StorageLedger.track`. Each entry carries a tag
(``param``, ``grad``, ``state``, ``input``), whether autograd saved it for backward and for
which module (``doctor/record/oom/watch.py`` tags them from the saved-tensor hook), so the
peak can be split by category (:meth:`StorageLedger.parts`). The peak's entries are kept as
they were at the peak: the list is taken when memory first goes down after a new peak.

With ``limit`` (bytes) it is also an allocator with a budget: an operation whose outputs would
take the total over the limit raises ``torch.OutOfMemoryError`` ("tracked allocator out of
memory. Tried to allocate N bytes; limit L bytes, allocated A bytes"), the same way a device
with that much memory would fail. That is how the tests (and a CPU user) check that a batch
fits a budget, on any machine.

Bytes are storage bytes (what ``torch.cuda.memory_allocated`` counts, without the allocator's
rounding and cache), on every device. Not seen: storages resized in place
(``UntypedStorage.resize_``) and memory that libraries allocate outside tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from pitstop.doctor.analysis.oom_records import OUTSIDE, MemoryParts, ModuleBytes

__all__ = ["Entry", "StorageLedger", "OUTSIDE", "LEDGER_SOURCE", "parts_of", "by_module"]

LEDGER_SOURCE = "tracked tensor storages (pitstop ledger)"


class Entry:
    """One live storage: its bytes, device, tag (param/grad/state/input or None), whether
    autograd saved it, and the module it was saved for."""

    __slots__ = ("nbytes", "device", "tag", "saved", "module", "origin", "ref", "__weakref__")

    def __init__(self, nbytes: int, device: str, tag: str | None = None, origin: str | None = None) -> None:
        self.nbytes, self.device, self.tag = nbytes, device, tag
        self.saved = False
        self.module: str | None = None
        self.origin = origin  # the module that made it (in its forward or its backward), OUTSIDE for none
        self.ref: Any = None

    @property
    def category(self) -> str:
        if self.tag in ("param", "grad", "state"):
            return self.tag
        return "activation" if self.saved else "temporary"


def _storages(t: torch.Tensor) -> list[Any]:
    try:
        return [t.untyped_storage()]
    except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, sparse, a subclass)
        return []


class StorageLedger(TorchDispatchMode):
    """The tracked allocator (see the module docstring). ``phase``: a callable naming the
    phase now (recorded with the peak); ``where``: one naming the module at work now (each
    new storage's ``origin``); ``limit``: bytes beyond which an operation fails."""

    def __init__(self, *, limit: int | None = None, phase: Callable[[], str] | None = None,
                 where: Callable[[], str | None] | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.phase, self.where = phase, where
        self.live: dict[tuple[str, int], Entry] = {}
        self.total = 0
        self.peak = 0
        self.peak_phase = ""
        self.peak_entries: list[Entry] = []
        self._dirty = False  # a new peak whose entries are not yet listed
        self._rising = False  # memory went up since it last went down
        self._top_phase = ""
        #: (phase, entries) at each local maximum of at least half the peak: the moments
        #: whose composition says how the peak moves with the batch
        self.moments: list[tuple[str, list[Entry]]] = []
        #: the most bytes alive in each phase (with ``phase``)
        self.phase_peaks: dict[str, int] = {}
        self.ops = 0
        #: the largest storage an operator made while the ledger ran (its category is read at the
        #: end: gradients and optimizer state are tagged then); the allocator needs one free piece
        #: that large, which the pieces freed before can fail to give (fragmentation)
        self.largest: Entry | None = None

    # -- registering --------------------------------------------------------------------------
    def _key(self, st: Any, device: torch.device) -> tuple[str, int] | None:
        """The storage's key; None for a storage without data (FSDP frees an unsharded
        parameter's storage between its uses: reading its pointer raises)."""
        try:
            return (str(device), st.data_ptr())
        except RuntimeError:
            return None

    def entry(self, t: torch.Tensor) -> Entry | None:
        """The entry of ``t``'s storage, None when the ledger does not know it."""
        for st in _storages(t):
            key = self._key(st, t.device)
            return None if key is None else self.live.get(key)
        return None

    def add(self, t: torch.Tensor, tag: str | None = None, *, check: bool = True) -> Entry | None:
        """Register ``t``'s storage (once; a known storage gets ``tag`` if it has none)."""
        for st in _storages(t):
            key = self._key(st, t.device)
            if key is None:
                return None
            known = self.live.get(key)
            if known is not None:
                if tag is not None and known.tag is None:
                    known.tag = tag
                return known
            nbytes = st.nbytes()
            if nbytes == 0:
                return None
            if check and self.limit is not None and self.total + nbytes > self.limit:
                raise torch.OutOfMemoryError(
                    f"tracked allocator out of memory. Tried to allocate {nbytes} bytes; limit {self.limit} bytes, "
                    f"allocated {self.total} bytes")
            entry = Entry(nbytes, str(t.device), tag, self.where() if self.where is not None and tag is None else None)
            entry.ref = weakref.ref(st, self._freed(key, entry))
            self.live[key] = entry
            self.total += nbytes
            phase = self.phase() if self.phase is not None else ""
            if self.total > self.phase_peaks.get(phase, 0):
                self.phase_peaks[phase] = self.total
            if self.total > self.peak:
                self.peak, self.peak_phase = self.total, phase
                self._dirty = True
            self._rising, self._top_phase = True, phase
            if check and (self.largest is None or nbytes > self.largest.nbytes):
                self.largest = entry
            return entry
        return None

    def _freed(self, key: tuple[str, int], entry: Entry) -> Callable[[Any], None]:
        def gone(_ref: Any) -> None:
            if self.live.get(key) is entry:
                if self._rising:  # memory goes down after going up: a local maximum
                    self._moment()
                del self.live[key]
                self.total -= entry.nbytes
        return gone

    def track(self, *objs: Any) -> None:
        """Register what existed before the ledger: modules (parameters and buffers),
        optimizers (parameters, gradients, state) and tensors (``input``)."""
        for obj in objs:
            if isinstance(obj, torch.nn.Module):
                for p in obj.parameters():
                    self.add(p, "param", check=False)
                    if p.grad is not None:
                        self.add(p.grad, "grad", check=False)
                for b in obj.buffers():
                    self.add(b, "param", check=False)
            elif isinstance(obj, torch.optim.Optimizer):
                for group in obj.param_groups:
                    for p in group["params"]:
                        self.add(p, "param", check=False)
                        if p.grad is not None:
                            self.add(p.grad, "grad", check=False)
                for state in obj.state.values():
                    for v in state.values():
                        if torch.is_tensor(v):
                            self.add(v, "state", check=False)
            elif isinstance(obj, torch.Tensor):
                self.add(obj, "input", check=False)
            elif isinstance(obj, (list, tuple, dict)):
                self.track(*[t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)])

    def retag(self, optimizers: Iterable[Any]) -> None:
        """At the end of a step: gradients and optimizer state made during it get their tags
        (their entries are the same objects the peak's list holds)."""
        for opt in optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None and (e := self.entry(p.grad)) is not None and e.tag in (None, "input"):
                        e.tag = "grad"
            for state in opt.state.values():
                for v in state.values():
                    if torch.is_tensor(v) and (e := self.entry(v)) is not None and e.tag in (None, "input"):
                        e.tag = "state"

    def saved(self, t: torch.Tensor, module: str | None) -> None:
        """Autograd saved ``t`` for backward while ``module`` ran its forward."""
        entry = self.entry(t) or self.add(t, check=False)
        if entry is not None and not entry.saved:
            entry.saved = True
            entry.module = module if module is not None else OUTSIDE

    # -- the mode -----------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.add(t)
        return out

    def _moment(self) -> None:
        self._rising = False
        if self._dirty or self.total >= self.peak // 2:
            entries = list(self.live.values())
            if self._dirty:  # the first time memory goes down since a new peak: list it
                self.peak_entries, self._dirty = entries, False
            self.moments.append((self._top_phase, entries))

    def close_peak(self) -> None:
        """List the peak's entries (and the last moment) if memory did not go down after them."""
        if self._rising:
            self._moment()

    # -- reading ------------------------------------------------------------------------------
    def parts(self, at_peak: bool = True, source: str = LEDGER_SOURCE) -> MemoryParts:
        """The peak (or what is alive now) by category."""
        if at_peak:
            self.close_peak()
        entries = self.peak_entries if at_peak else list(self.live.values())
        return parts_of(entries, total=self.peak if at_peak else self.total, source=source,
                        phase=self.peak_phase if at_peak else "")

    def moment_parts(self, source: str = LEDGER_SOURCE) -> list[MemoryParts]:
        """Each local maximum's :class:`MemoryParts`, without those another one outweighs in
        every category (they can never be the peak, whatever a fix removes)."""
        self.close_peak()
        parts = [parts_of(entries, total=sum(e.nbytes for e in entries), source=source, phase=phase)
                 for phase, entries in self.moments]
        return [p for i, p in enumerate(parts) if not any(j != i and _outweighs(q, p, j < i)
                                                          for j, q in enumerate(parts))]


def _outweighs(q: MemoryParts, p: MemoryParts, earlier: bool) -> bool:
    keys = ("params", "grads", "optimizer_state", "activations", "temporaries")
    ge = all(getattr(q, k) >= getattr(p, k) for k in keys)
    same = all(getattr(q, k) == getattr(p, k) for k in keys)
    return ge and (not same or earlier)  # of equal moments the first is kept


def parts_of(entries: Iterable[Entry], *, total: int | None, source: str, phase: str = "") -> MemoryParts:
    """:class:`MemoryParts` of ``entries`` (activations by module, largest first)."""
    sums = {"param": 0, "grad": 0, "state": 0, "activation": 0, "temporary": 0}
    saved: list[Entry] = []
    outside = 0
    for e in entries:
        cat = e.category
        sums[cat] += e.nbytes
        if cat == "activation":
            saved.append(e)
        elif cat == "temporary" and (e.origin is None or e.origin == OUTSIDE):
            outside += e.nbytes
    return MemoryParts(params=sums["param"], grads=sums["grad"], optimizer_state=sums["state"],
                       activations=sums["activation"], temporaries=sums["temporary"], by_module=by_module(saved),
                       total=total, total_source=source, phase=phase, temporaries_outside=outside)


def by_module(entries: Iterable[Entry]) -> list[ModuleBytes]:
    """Bytes per module of saved entries, largest first."""
    out: dict[str, int] = {}
    for e in entries:
        name = e.module if e.module is not None else OUTSIDE
        out[name] = out.get(name, 0) + e.nbytes
    return [ModuleBytes(module=k, bytes=v) for k, v in sorted(out.items(), key=lambda kv: -kv[1])]
