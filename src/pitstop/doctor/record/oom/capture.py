"""The moment the script ran out of memory: where it was and what was allocated (in the child).

:func:`capture` is called by the child bootstrap (``doctor/run/child.py``) with the exception,
while its traceback still holds every frame (and so every tensor the failing code had), before
anything is released:

- **where**: the phase from the frames the error went through (``torch.autograd``'s backward,
  an optimizer's step, a module's forward, a DataLoader, a loss function), the module (in a
  forward the innermost module whose ``forward`` frame is on the traceback; in backward the
  module whose saved tensors the backward read last, from the saved-tensor hook), the script's
  own line, and the step;
- **what was allocated**, by category: parameters and buffers, gradients, optimizer state
  (the optimizers the doctor saw step, and any other ``torch.optim.Optimizer`` alive),
  activations saved for backward by module (those autograd still keeps), and every other
  live tensor on the device (temporaries: the batch, outputs, the tensors of the failing
  frames). The allocated total comes from an independent count: the CUDA allocator
  (``memory_allocated``), the tracked allocator's own message, or none (CPU);
- on CUDA, the allocator's facts (reserved, fragmentation) and its history of live blocks
  (``torch.cuda.memory._snapshot``, recorded from the first training forward on).
"""

from __future__ import annotations

import gc
import os
import warnings
from typing import Any

import torch

from pitstop.doctor.analysis.oom_records import (SCRIPT_EXIT_RAISED, AllocatorFacts, BlockBytes, MemoryParts,
                                                 ModuleBytes, OomRecord, looks_like_oom, parse_oom_message)
from pitstop.doctor.record.memory import capacity_bytes
from pitstop.doctor.record.oom.watch import storage_of

__all__ = ["is_oom", "capture", "phase_of", "allocator_facts", "snapshot_facts", "cpu_capacity"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_LOSS_WORDS = ("loss", "entropy", "nll", "kl_div")


def is_oom(exc: BaseException) -> bool:
    """Out-of-memory errors of any device (CUDA's OutOfMemoryError, MemoryError, the CPU
    allocator's "can't allocate memory")."""
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return looks_like_oom(type(exc).__name__, str(exc))


def _frames(exc: BaseException) -> list[Any]:
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


def phase_of(frames: list[Any]) -> tuple[str | None, Any]:
    """(phase, innermost module whose forward frame is on the stack) of a traceback's frames,
    outermost first (see the module docstring)."""
    phase, module, backward = None, None, False
    for f in frames:
        path = f.f_code.co_filename
        name = f.f_code.co_name
        if path.startswith(_TORCH_DIR + "autograd") or (path.endswith("_tensor.py") and name == "backward"):
            phase, backward = "backward", True
        elif path.startswith(_TORCH_DIR + "optim"):
            phase = "optimizer" if not backward else phase
        elif path.startswith(_TORCH_DIR + "utils" + os.sep + "data"):
            phase = "data"
        elif name == "forward" and isinstance(f.f_locals.get("self"), torch.nn.Module):
            module = f.f_locals["self"]
            phase = "backward" if backward else "forward"  # a checkpointed block rebuilt in backward
        elif path.startswith(_TORCH_DIR + "nn" + os.sep + "functional") and module is None and not backward:
            phase = "loss" if any(w in name for w in _LOSS_WORDS) else phase or "other"
    return phase, module


def _script_line(frames: list[Any], script: str | None) -> str | None:
    """The innermost frame of the script file (else of any file outside torch and pitstop)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    best = None
    for f in frames:
        path = os.path.abspath(f.f_code.co_filename)
        if script and path == os.path.abspath(script):
            best = f"{os.path.basename(path)}:{f.f_lineno}"
        elif best is None and not path.startswith((_TORCH_DIR, here)) and not path.startswith("<"):
            best = f"{os.path.basename(path)}:{f.f_lineno}"
    return best


def _live_tensors(device: str) -> tuple[dict[tuple[str, int], tuple[Any, int]], list[Any]]:
    """Every tensor alive on ``device`` (found by the garbage collector), one per storage, and
    every optimizer alive (one built but never stepped: a first step that failed)."""
    out: dict[tuple[str, int], tuple[Any, int]] = {}
    with warnings.catch_warnings():  # isinstance() on deprecated module objects warns
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
        tensors = [o for o in objects if isinstance(o, torch.Tensor)]
        optimizers = [o for o in objects if isinstance(o, torch.optim.Optimizer)]
    del objects
    for obj in tensors:
        try:
            if obj.device.type != device:
                continue
            key = storage_of(obj)
            if key is None or key in out:
                continue
            out[key] = (obj, obj.untyped_storage().nbytes())
        except Exception:
            continue
    return out, optimizers


def _parts(inst: Any, device: str, total: int | None, source: str) -> tuple[MemoryParts, list[BlockBytes]]:
    live, alive_optimizers = _live_tensors(device)
    params, grads, state = set(), set(), set()
    for info in inst.models.values():
        model = info["ref"]()
        if model is not None:
            params.update(storage_of(t) for t in (*model.parameters(), *model.buffers()))
            grads.update(storage_of(p.grad) for p in model.parameters() if p.grad is not None)
    optimizers = {id(o): o for o in (*inst.optimizers.values(), *alive_optimizers)}
    for opt in optimizers.values():
        for group in opt.param_groups:
            params.update(storage_of(p) for p in group["params"])
            grads.update(storage_of(p.grad) for p in group["params"] if p.grad is not None)
        state.update(storage_of(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    watch = inst.memory.watch
    saved = watch.alive_saved() if watch is not None else {}
    sums = {"params": 0, "grads": 0, "state": 0, "acts": 0, "temps": 0}
    modules: dict[str, int] = {}
    for key, (_, nbytes) in live.items():
        if key in params:
            sums["params"] += nbytes
        elif key in grads:
            sums["grads"] += nbytes
        elif key in state:
            sums["state"] += nbytes
        elif key in saved:
            sums["acts"] += nbytes
            modules[saved[key][1]] = modules.get(saved[key][1], 0) + nbytes
        else:
            sums["temps"] += nbytes
    by_module = [ModuleBytes(module=k, bytes=v) for k, v in sorted(modules.items(), key=lambda kv: -kv[1])]
    blocks = []
    if watch is not None and watch.block_of:
        for name in watch.block_of.values():
            held = sum(m.bytes for m in by_module if m.module == name or m.module.startswith(name + "."))
            blocks.append(BlockBytes(name=name, saved=held))
    parts = MemoryParts(params=sums["params"], grads=sums["grads"], optimizer_state=sums["state"],
                        activations=sums["acts"], temporaries=sums["temps"], by_module=by_module,
                        total=total, total_source=source)
    return parts, blocks


def snapshot_facts(snap: dict) -> tuple[int | None, list[ModuleBytes]]:
    """From a ``torch.cuda.memory._snapshot()``: the largest free block in the reserve, and the
    source lines (outside torch) holding the most allocated bytes (five, largest first)."""
    sites: dict[str, int] = {}
    largest = None
    for seg in snap.get("segments", []):
        for block in seg.get("blocks", []):
            if block.get("state") == "inactive":
                largest = max(largest or 0, int(block.get("size", 0)))
            elif block.get("state") == "active_allocated":
                site = _site_of(block.get("frames", []))
                sites[site] = sites.get(site, 0) + int(block.get("size", 0))
    return largest, [ModuleBytes(module=k, bytes=v) for k, v in sorted(sites.items(), key=lambda kv: -kv[1])[:5]]


def allocator_facts(history: str) -> AllocatorFacts:
    """The CUDA caching allocator now: its counters and, when recorded, its live blocks' sites."""
    stats = torch.cuda.memory_stats()
    top: list[ModuleBytes] = []
    largest = None
    if history == "recorded":
        try:
            largest, top = snapshot_facts(torch.cuda.memory._snapshot())
        except Exception as exc:
            history = f"snapshot failed ({type(exc).__name__}: {exc})"
    return AllocatorFacts(allocated=int(stats.get("allocated_bytes.all.current", 0)),
                          reserved=int(stats.get("reserved_bytes.all.current", 0)),
                          inactive_split=int(stats.get("inactive_split_bytes.all.current", 0)),
                          largest_free=largest, top_sites=top, history=history)


def _site_of(frames: list[dict]) -> str:
    """The first frame outside torch of an allocation's Python stack (innermost first)."""
    for fr in frames:
        path = fr.get("filename", "")
        if path and not path.startswith(_TORCH_DIR) and "pitstop" not in path:
            return f"{os.path.basename(path)}:{fr.get('line', '?')}"
    return "(inside torch)"


def cpu_capacity() -> tuple[int | None, str]:
    """The memory a CPU process may use: the cgroup's limit when one is set, else the machine's RAM."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            text = f.read().strip()
        if text.isdigit():
            return int(text), "the cgroup's memory.max"
    except OSError:
        pass
    return capacity_bytes("cpu"), "the machine's RAM"


def capture(exc: BaseException, inst: Any, script: str | None) -> OomRecord | None:
    """The :class:`OomRecord` of ``exc`` when it is an out-of-memory error (None otherwise);
    never raises (what could not be read is said in ``notes``)."""
    if not is_oom(exc):
        return None
    notes: list[str] = []
    frames = _frames(exc)
    msg = parse_oom_message(str(exc))
    phase, module = phase_of(frames)
    watch = inst.memory.watch if inst.full else None
    name = None
    if module is not None and watch is not None:
        name = watch.names.get(id(module), type(module).__name__)
    elif module is not None:
        name = type(module).__name__
    if phase == "backward" and watch is not None and watch.last_unpacked and module is None:
        name = watch.last_unpacked
    device = "cuda" if isinstance(exc, torch.OutOfMemoryError) and "CUDA" in str(exc) else _device(inst)
    parts = blocks = allocator = None
    total, source = None, "none: the categories are the live tensors found (no allocator counter on the CPU)"
    try:
        if device == "cuda":
            allocator = allocator_facts(watch.history if watch is not None else "not recorded (light mode)")
            total, source = allocator.allocated, "the CUDA allocator (memory_allocated)"
        elif msg.limit is not None and msg.allocated is not None:
            total, source = msg.allocated, "the tracked allocator's count (its error message)"
        if inst.full:
            parts, blocks = _parts(inst, device, total, source)
    except Exception as exc2:  # a failure must still be reported, with what could be read
        notes.append(f"memory at the failure not read: {type(exc2).__name__}: {exc2}")
    if msg.capacity:
        capacity, cap_source = msg.capacity, "the CUDA error message"
    elif msg.limit:
        capacity, cap_source = msg.limit, "the tracked allocator's limit"
    elif device == "cuda":
        capacity, cap_source = capacity_bytes("cuda"), "CUDA device memory"
    else:
        capacity, cap_source = cpu_capacity()
    log = inst.log
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return OomRecord(
        kind="raised", error=type(exc).__name__, message=first, device=device, step=log.index,
        step_kind=log.kind(), phase=phase, module=name, line=_script_line(frames, script), tried=msg.tried,
        capacity=capacity, capacity_source=cap_source, free=msg.free, parts=parts, allocator=allocator,
        batch_size=(inst.batch_size or (watch.batch if watch is not None else None)) if inst.full else None,
        script_exit=SCRIPT_EXIT_RAISED,
        blocks=blocks or [], blocks_pattern=watch.blocks_pattern if watch is not None else "", notes=notes)


def _device(inst: Any) -> str:
    from pitstop.doctor.record.collect import device_of

    try:
        return device_of(inst)
    except Exception:
        return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
