"""Memory measurements: parameters, gradients, optimizer state, activations, peak, leaks.

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
from collections.abc import Iterable
from typing import Any

__all__ = [
    "storage_key", "unique_bytes", "param_bytes", "grad_bytes", "state_bytes", "rss_bytes",
    "peak_rss_bytes", "capacity_bytes", "graph_nodes",
]


def storage_key(t) -> tuple[int, int] | None:
    """(device index-ish, data pointer) of a tensor's storage, or None when it has none."""
    try:
        st = t.untyped_storage()
        return (hash(t.device), st.data_ptr())
    except Exception:
        return None


def unique_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view is not counted twice)."""
    seen: dict[tuple[int, int], int] = {}
    for t in tensors:
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
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
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
        roots = [o.grad_fn for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen: set[int] = set()
    keep = []  # keep node wrappers alive so that ids stay unique during the walk
    stack = list(roots)
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        try:
            stack.extend(n for n, _ in node.next_functions)
        except Exception:
            continue
    return len(seen)
