"""The records of memory at its limit: an out-of-memory failure and the memory profile of one step (torch-free).

:class:`OomRecord` is what the doctor knows about a run that ran out of memory: where (step,
phase, module, script line), what was allocated at that moment by category
(:class:`MemoryParts`), the allocator's own facts on CUDA (:class:`AllocatorFacts`), the
device's capacity, the resident memory before a kill (:class:`RssSample`) and the exit status
the script itself would have had. The child fills it when the script raises
(``doctor/record/oom/capture.py``); the parent fills it when the kernel killed the child
(``doctor/run/oomkill.py``).

:class:`MemoryProfile` is one training step followed storage by storage
(``doctor/record/oom/ledger.py``, ``doctor/record/oom/watch.py``): its peak and what the peak was
made of, the activations saved for backward by module and by repeated block, the optimizer
step's own peak. ``doctor/analysis/fits.py`` turns either into "what fits".

Every field is in bytes unless its name says otherwise; ``None`` means "not measured".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ModuleBytes", "MemoryParts", "AllocatorFacts", "RssSample", "OomRecord", "BlockBytes",
           "MemoryProfile", "OomMessage", "parse_oom_message", "looks_like_oom", "SCRIPT_EXIT_RAISED", "OUTSIDE"]

#: the module name of tensors saved for backward outside every module (the loss, functional code)
OUTSIDE = "(outside modules)"

#: what ``python script.py`` exits with when the script raises (the interpreter's status for an
#: uncaught exception)
SCRIPT_EXIT_RAISED = 1


@dataclass(frozen=True)
class ModuleBytes:
    """Bytes held on behalf of one module (its qualified name in the model, ``""`` for the
    model itself, ``"(outside modules)"`` for tensors saved by code outside any module, such
    as the loss)."""

    module: str
    bytes: int


@dataclass(frozen=True)
class MemoryParts:
    """What was allocated, by category: ``params`` (the model's and the optimizers'
    parameters and buffers), ``grads``, ``optimizer_state``, ``activations`` (tensors autograd
    saved for backward, ``by_module``), ``temporaries`` (every other live tensor: the batch,
    outputs, gradients in flight, a tensor being built). ``total`` is the allocated total from
    an independent count (``total_source``: the CUDA allocator, a tracked allocator, or the
    live tensors found); ``unattributed`` is what the categories do not explain; ``phase``:
    the step's phase at that moment, when known; ``temporaries_outside``: the temporaries
    made outside every module's forward and backward (the loss, the batch, the script's code),
    when known."""

    params: int = 0
    grads: int = 0
    optimizer_state: int = 0
    activations: int = 0
    temporaries: int = 0
    by_module: list[ModuleBytes] = field(default_factory=list)
    total: int | None = None
    total_source: str = ""
    phase: str = ""
    temporaries_outside: int = 0

    @property
    def attributed(self) -> int:
        return self.params + self.grads + self.optimizer_state + self.activations + self.temporaries

    @property
    def unattributed(self) -> int | None:
        return None if self.total is None else self.total - self.attributed

    @property
    def fixed(self) -> int:
        """The part that does not grow with the batch: parameters, gradients, optimizer state."""
        return self.params + self.grads + self.optimizer_state


@dataclass(frozen=True)
class AllocatorFacts:
    """The CUDA caching allocator at the failure: ``allocated`` (tensors), ``reserved`` (held
    from the driver), ``inactive_split`` (free pieces of split blocks: fragmentation),
    ``largest_free`` (the largest free block in the reserve), ``top_sites`` (the source
    lines holding most bytes, from the allocator's history), ``history`` (whether the
    allocator's record of the failure was available, and why not)."""

    allocated: int | None = None
    reserved: int | None = None
    inactive_split: int | None = None
    largest_free: int | None = None
    top_sites: list[ModuleBytes] = field(default_factory=list)
    history: str = ""

    @property
    def cached(self) -> int | None:
        """Reserved but not allocated: the allocator's cache."""
        return None if self.reserved is None or self.allocated is None else max(0, self.reserved - self.allocated)


@dataclass(frozen=True)
class RssSample:
    """The process's resident memory ``seconds`` before its end, during ``step`` in ``phase``."""

    seconds: float
    rss: int
    step: int = 0
    phase: str = ""


@dataclass(frozen=True)
class OomRecord:
    """One out-of-memory failure (see the module docstring). ``kind``: ``"raised"`` (the
    script raised an out-of-memory error) or ``"killed"`` (SIGKILL while its memory grew:
    the kernel's OOM killer, likely). ``error``: the exception's class, or the signal.
    ``phase``: forward, backward, optimizer, loss, data or other; ``module``: where in the
    model (the forward's innermost module, or in backward the module whose saved tensors
    the backward read last); ``line``: the script's own line. ``tried``: bytes the failing
    allocation asked for; ``capacity`` and ``free``: the device's memory and what was free
    (from the error message on CUDA; the machine's or the cgroup's limit on CPU).
    ``script_exit``: the status ``python script.py`` would have ended with; ``blocks``: the
    activations each repeated block still held (``input``: 0, not told apart at a failure)."""

    kind: str
    error: str
    message: str = ""
    device: str = "cpu"
    step: int | None = None
    step_kind: str | None = None
    phase: str | None = None
    module: str | None = None
    line: str | None = None
    tried: int | None = None
    capacity: int | None = None
    capacity_source: str = ""
    free: int | None = None
    parts: MemoryParts | None = None
    allocator: AllocatorFacts | None = None
    batch_size: int | None = None
    script_exit: int | None = None
    rss: list[RssSample] = field(default_factory=list)
    blocks: list[BlockBytes] = field(default_factory=list)
    blocks_pattern: str = ""
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """Step, phase and module in words."""
        bits = []
        if self.phase and self.module == OUTSIDE:
            bits.append(f"{self.phase} outside the model's modules (the loss, the script's own code)")
        elif self.phase:
            bits.append(self.phase + (f" of {self.module}" if self.module else ""))
        elif self.module:
            bits.append(f"in {self.module}")
        if self.step is not None:
            bits.append(f"step {self.step}" + (f" ({self.step_kind})" if self.step_kind else ""))
        if self.line:
            bits.append(f"at {self.line}")
        return ", ".join(bits) if bits else "where unknown"


@dataclass(frozen=True)
class BlockBytes:
    """One repeated block of the model (an item of its outermost ``ModuleList`` /
    ``Sequential`` of blocks): bytes it saved for backward in the profiled step, of which
    ``input`` are its own inputs (still saved when the block is checkpointed), and its
    forward's seconds per step (None when not timed)."""

    name: str
    saved: int
    input: int = 0
    seconds: float | None = None


@dataclass(frozen=True)
class MemoryProfile:
    """One training step followed storage by storage (see the module docstring).

    ``batch``: samples of the step's training forwards, ``micro_batches``: how many forwards;
    ``peak``: the most tensor bytes alive at once, in ``peak_phase``, made of ``at_peak``;
    ``optimizer_peak``: the most during the optimizer step (does not grow with the batch);
    ``moments``: the composition at each local maximum of the step that could be its peak at
    another batch or with a fix (the others outweighed in every category are left out);
    ``saved``: bytes autograd saved during the step (``by_module``, ``blocks``);
    ``precision_saved``: for an autocast dtype, the bytes per sample one training forward of the
    model saves under it divided by what it saves per sample as it runs now, and
    ``precision_fixed`` the bytes it adds whatever the batch (16-bit weight copies), measured
    on 2 and 4 samples of the last batch; ``allocator_peak``: the CUDA allocator's peak over the same step (a cross-check);
    ``largest``: the bytes of the largest storage made in the step and ``largest_category`` its
    category (``param``, ``grad``, ``state``: fixed; ``activation``, ``temporary``: they grow with the batch)."""

    step: int
    batch: int
    micro_batches: int = 1
    peak: int = 0
    peak_phase: str = ""
    at_peak: MemoryParts = field(default_factory=MemoryParts)
    moments: list[MemoryParts] = field(default_factory=list)
    optimizer_peak: int | None = None
    saved: int = 0
    by_module: list[ModuleBytes] = field(default_factory=list)
    blocks: list[BlockBytes] = field(default_factory=list)
    blocks_pattern: str = ""
    precision_saved: dict[str, float] = field(default_factory=dict)
    precision_fixed: dict[str, int] = field(default_factory=dict)
    allocator_peak: int | None = None
    device: str = "cpu"
    source: str = ""
    notes: list[str] = field(default_factory=list)
    largest: int = 0
    largest_category: str = ""

    @property
    def micro_batch(self) -> float:
        """Samples per forward (the peak belongs to one micro-batch)."""
        return self.batch / max(1, self.micro_batches)


@dataclass(frozen=True)
class OomMessage:
    """What an out-of-memory message says (CUDA's, the CPU allocator's, pitstop's tracked
    allocator's): the bytes it ``tried`` to allocate, the device's ``capacity`` and ``free``
    bytes, what PyTorch had ``allocated`` and ``reserved``, a tracked ``limit``."""

    tried: int | None = None
    capacity: int | None = None
    free: int | None = None
    allocated: int | None = None
    reserved_unallocated: int | None = None
    limit: int | None = None


_UNIT = {"b": 1, "bytes": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = r"([0-9.]+)\s*(bytes|B|KiB|MiB|GiB|TiB)"


def _size(m: re.Match | None) -> int | None:
    return None if m is None else int(float(m.group(1)) * _UNIT[m.group(2).lower()])


def parse_oom_message(text: str) -> OomMessage:
    """The numbers of an out-of-memory message (None where it says nothing)."""
    flat = " ".join(text.split())
    tried = _size(re.search(r"[Tt]ried to allocate " + _SIZE, flat))
    if tried is None:
        m = re.search(r"you tried to allocate (\d+) bytes", flat)
        tried = int(m.group(1)) if m else None
    return OomMessage(
        tried=tried,
        capacity=_size(re.search(r"total capacity of " + _SIZE, flat)),
        free=_size(re.search(r"of which " + _SIZE + r" is free", flat)),
        allocated=_size(re.search(_SIZE + r" is allocated by PyTorch", flat)) or _size(
            re.search(r"allocated " + _SIZE, flat)),
        reserved_unallocated=_size(re.search(_SIZE + r" is reserved by PyTorch but unallocated", flat)),
        limit=_size(re.search(r"limit " + _SIZE, flat)))


_OOM_TYPES = ("OutOfMemoryError", "MemoryError")
_OOM_TEXT = ("out of memory", "can't allocate memory", "failed to allocate", "cannot allocate memory")


def looks_like_oom(error: str, message: str) -> bool:
    """Whether an exception (class name ``error``, its message) is an out-of-memory error of
    any device: CUDA's ``OutOfMemoryError``, ``MemoryError``, the CPU allocator's
    ``RuntimeError`` ("can't allocate memory")."""
    if error in _OOM_TYPES:
        return True
    text = message.lower()
    return error.endswith("Error") and any(s in text for s in _OOM_TEXT)
