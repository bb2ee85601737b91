"""Decoded events -> the columns of :class:`~pitstop.trace.model.Table` (torch-free).

Events arrive in chunks (see :func:`pitstop.trace.load.load_timeline`); each chunk is sorted into
the four tables and the steps and turned into numpy arrays at once, so the decoded structs of one
chunk are all that is alive besides the columns.
"""

from __future__ import annotations

import re

import numpy as np

from pitstop.trace.model import (COPY_PAGEABLE, COPY_PINNED, COPY_UNKNOWN, GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET,
                                 OP_ANNOTATION, OP_OPERATOR, Step, Table)
from pitstop.trace.wire import WireEvent

__all__ = ["EventSorter", "as_int"]

_GPU = {"kernel": GPU_KERNEL, "Kernel": GPU_KERNEL, "gpu_memcpy": GPU_MEMCPY, "Memcpy": GPU_MEMCPY,
        "gpu_memset": GPU_MEMSET, "Memset": GPU_MEMSET}
_RUNTIME = {"cuda_runtime", "Runtime", "cuda_driver"}
_OPS = {"cpu_op", "Operator", "user_annotation"}
_PYTHON = {"python_function"}
_OLD = {"Kernel", "Runtime", "Operator", "Memcpy", "Memset"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NCOLS = 10  # name, start, end, lane, correlation, kind, flag, device, stack, external
_DTYPES = (np.int32, np.float64, np.float64, np.int64, np.int64, np.int8, np.int8, np.int32, np.int32, np.int64)


def as_int(value: object, default: int = -1) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return default
    return default


def _ints(values: list) -> np.ndarray:
    """An int64 column; None (and anything that is not an integer) becomes -1."""
    try:
        return np.array([-1 if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([as_int(v) for v in values], dtype=np.int64)


class _Lanes:
    """Thread ids as integers: numbers as they are, other names as small negative ids."""

    def __init__(self) -> None:
        self.named: dict[object, int] = {}

    def column(self, tids: list) -> np.ndarray:
        try:
            return np.array([-1 if t is None else int(t) for t in tids], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return np.array([self.one(t) for t in tids], dtype=np.int64)

    def one(self, tid: object) -> int:
        if isinstance(tid, int):
            return tid
        if isinstance(tid, str) and tid.isdigit():
            return int(tid)
        return self.named.setdefault(tid, -2 - len(self.named))


def _copy_flag(ev: WireEvent) -> int:
    args = ev.args
    kinds = " ".join(k for k in (ev.name, args.src_kind if args else None, args.dst_kind if args else None) if k)
    if "Pageable" in kinds:
        return COPY_PAGEABLE
    if "Pinned" in kinds:
        return COPY_PINNED
    return COPY_UNKNOWN


class _TableBuilder:
    """One table's columns, appended chunk by chunk, sorted by start once at the end."""

    def __init__(self, lanes: _Lanes, *, stacks: bool = False) -> None:
        self.lanes = lanes
        self.names: dict[str, int] = {}
        self.stack_ids: dict[str, int] = {}
        self.with_stacks = stacks
        self.parts: list[list[np.ndarray | None]] = []

    def add(self, evs: list[WireEvent], *, lane: np.ndarray | None = None, kind: np.ndarray | None = None,
            flag: np.ndarray | None = None, device: np.ndarray | None = None) -> None:
        n = len(evs)
        if not n:
            return
        names, stack_ids = self.names, self.stack_ids
        name = np.array([names.setdefault(e.name, len(names)) for e in evs], dtype=np.int32)
        start = np.array([e.ts for e in evs], dtype=np.float64)
        end = start + np.array([e.dur or 0.0 for e in evs], dtype=np.float64)
        args = [e.args for e in evs]
        corr = _ints([a.correlation if a is not None else None for a in args])
        ext = _ints([(a.external_id if a.external_id is not None else a.external_id_2021) if a is not None else None
                     for a in args])
        stack = np.full(n, -1, dtype=np.int32)
        if self.with_stacks:
            stack = np.array([stack_ids.setdefault(a.call_stack, len(stack_ids)) if a is not None and a.call_stack
                              else -1 for a in args], dtype=np.int32)
        self.parts.append([
            name, start, end, self.lanes.column([e.tid for e in evs]) if lane is None else lane, corr,
            np.zeros(n, dtype=np.int8) if kind is None else kind, np.zeros(n, dtype=np.int8) if flag is None else flag,
            np.full(n, -1, dtype=np.int32) if device is None else device, stack, ext])

    def table(self) -> Table:
        """The columns, sorted by start (stable); each column's chunks are joined, reordered and
        released before the next, so the peak is the table plus one column, not three tables."""
        parts, self.parts = self.parts, []
        start = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.float64)
        order = np.argsort(start, kind="stable")
        del start
        cols = []
        for i, dtype in enumerate(_DTYPES):
            col = np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=dtype)
            for p in parts:
                p[i] = None
            col = col[order]
            col.flags.writeable = False
            cols.append(col)
        return Table(tuple(self.names), *cols, stacks=tuple(self.stack_ids))


class EventSorter:
    """Sorts decoded events into GPU, runtime, operator and Python tables and the steps."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.gpu_devices: set[int] = set()
        self.known = 0
        self.events = 0
        self.old = False
        lanes = _Lanes()
        self.gpu, self.runtime = _TableBuilder(lanes), _TableBuilder(lanes)
        self.ops, self.python = _TableBuilder(lanes, stacks=True), _TableBuilder(lanes)
        self.lanes = lanes

    def add(self, events: list[WireEvent]) -> None:
        self.events += len(events)
        xs = [e for e in events if e.ph == "X" and e.ts is not None and e.cat is not None]
        self.old = self.old or bool({e.cat for e in xs} & _OLD)
        gpu = [e for e in xs if e.cat in _GPU]
        rt = [e for e in xs if e.cat in _RUNTIME]
        ops = [e for e in xs if e.cat in _OPS]
        self.known += len(gpu) + len(rt) + len(ops)
        steps = [e for e in ops if e.name.startswith("ProfilerStep#") and _STEP.match(e.name)]
        if steps:
            ops = [e for e in ops if not (e.name.startswith("ProfilerStep#") and _STEP.match(e.name))]
            self.steps += [Step(int(e.name[13:]), float(e.ts), float(e.ts) + float(e.dur or 0.0)) for e in steps]
        self._gpu(gpu)
        self.runtime.add(rt)
        self.ops.add(ops, kind=np.array([OP_ANNOTATION if e.cat == "user_annotation" else OP_OPERATOR for e in ops],
                                        dtype=np.int8))
        self.python.add([e for e in xs if e.cat in _PYTHON])

    def _gpu(self, evs: list[WireEvent]) -> None:
        if not evs:
            return
        args = [e.args for e in evs]
        stream = _ints([a.stream if a is not None else None for a in args])
        tid = self.lanes.column([e.tid for e in evs])
        device = _ints([a.device if a is not None and a.device is not None else e.pid for e, a in zip(evs, args)])
        self.gpu_devices |= set(np.unique(device).tolist())
        kind = np.array([_GPU[e.cat] for e in evs], dtype=np.int8)
        flag = np.array([_copy_flag(e) if k == GPU_MEMCPY else COPY_UNKNOWN for e, k in zip(evs, kind.tolist())],
                        dtype=np.int8)
        self.gpu.add(evs, lane=np.where(stream != -1, stream, tid), kind=kind, flag=flag, device=device.astype(np.int32))
