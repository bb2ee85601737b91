"""Peak memory of one training step, and the memory limit the batch-size sweep respects.

- CUDA: the caching allocator's ``max_memory_allocated`` after ``reset_peak_memory_stats``
  (real bytes), and the device's total memory as the limit; a real out-of-memory error is
  caught and reported, never fatal to the search.
- CPU: there is no allocator counter to reset, and process peak RSS only grows, so one
  extra (untimed) step runs under PyTorch's own ``MemTracker``
  (``torch.distributed._tools.mem_tracker``: a ``TorchDispatchMode`` that follows every
  tensor storage alive during the step: parameters, gradients, optimizer state,
  activations, temporaries), through the engine's tracker
  (:func:`pitstop.engine.phase_memory.memtracker_peak`), which also follows a step of
  several micro-batches (gradient accumulation). The limit is a *cap* the user sets (``memory_cap=``), by
  default half of the RAM available when the search starts: a batch "fits" when its
  measured peak times ``1 + margin`` stays under the cap. The machine's memory is never
  exhausted to find the limit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

__all__ = ["is_oom", "tracked_peak", "available_ram", "parse_bytes", "default_cap", "MEASURE_CPU", "MEASURE_CUDA"]

MEASURE_CPU = "torch MemTracker, one tracked step (CPU)"
MEASURE_CUDA = "torch.cuda.max_memory_allocated"


def is_oom(exc: BaseException) -> bool:
    """Out-of-memory errors of any device (CUDA's OutOfMemoryError, CPU allocation failures)."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text
                                              or "failed to allocate" in text)


def tracked_peak(step: Callable[[], Any], model: Any, optimizer: Any) -> int | None:
    """Peak bytes of ``step()`` on the CPU (:func:`pitstop.engine.phase_memory.memtracker_peak`,
    accumulation steps included); None when the tracker is not available in this torch build or
    cannot follow the step. An out-of-memory error is raised (the run's status)."""
    from pitstop.engine.phase_memory import memtracker_peak

    try:
        return memtracker_peak(step, model, optimizer) or None
    except Exception as exc:
        if is_oom(exc):
            raise
        return None


def available_ram() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free pages; None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "tb": 1000**4}


def parse_bytes(value: int | float | str) -> int:
    """``4GiB``, ``500 MB``, ``1e9`` or an int, to bytes; ValueError naming the value."""
    if isinstance(value, bool):
        raise ValueError(f"memory size must be a number of bytes or a string like '4GiB', got {value!r}")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"memory size must be > 0, got {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"memory size {value!r} not understood; use bytes or e.g. '512MiB', '4GiB', '2GB'")
    n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if n <= 0:
        raise ValueError(f"memory size must be > 0, got {value!r}")
    return int(n)


def default_cap(device: str) -> tuple[int | None, str]:
    """The limit used when the user gives none: CUDA total memory, or half the available RAM."""
    if device == "cuda":
        from pitstop.doctor.record.memory import capacity_bytes  # the one CUDA total-memory lookup

        return capacity_bytes("cuda"), "CUDA device memory"
    ram = available_ram()
    return (ram // 2 if ram else None), "half of the RAM available when the search started"
