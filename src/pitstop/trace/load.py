"""Read one Kineto trace file into a :class:`~pitstop.trace.model.Timeline` (torch-free).

The decoder is msgspec's typed JSON decoder over the structs of :mod:`pitstop.trace.wire`:
it reads the (gunzipped) bytes once and builds only the fields named there. Every problem
with the file itself (missing, truncated gzip, not JSON, JSON that is not a Kineto trace)
raises :class:`TraceError` with one line that names the file.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import msgspec
import numpy as np

from pitstop.trace.model import (COPY_PAGEABLE, COPY_PINNED, COPY_UNKNOWN, GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET,
                                 Device, Step, Table, Timeline)
from pitstop.trace.wire import WireDevice, WireEvent, WireTrace

__all__ = ["TraceError", "load_timeline", "read_bytes", "decode", "TRACE_SUFFIXES"]

TRACE_SUFFIXES = (".json", ".json.gz")

_GPU = {"kernel": GPU_KERNEL, "Kernel": GPU_KERNEL, "gpu_memcpy": GPU_MEMCPY, "Memcpy": GPU_MEMCPY,
        "gpu_memset": GPU_MEMSET, "Memset": GPU_MEMSET}
_RUNTIME = {"cuda_runtime", "Runtime", "cuda_driver"}
_OPS = {"cpu_op", "Operator", "user_annotation"}
_PYTHON = {"python_function"}
_OLD = {"Kernel", "Runtime", "Operator", "Memcpy", "Memset"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_DECODER = msgspec.json.Decoder(WireTrace)


class TraceError(Exception):
    """The file cannot be read as a Kineto trace; the message is one line naming it."""


def read_bytes(path: Path) -> bytes:
    """The JSON bytes of ``path``, gunzipped when it is gzip (by its magic bytes, not its name)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=fh) as gz:
                    return gz.read()
            return fh.read()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory") from None
    except PermissionError:
        raise TraceError(f"{path}: permission denied") from None
    except EOFError:
        raise TraceError(f"{path}: truncated gzip file (it ends before the end of the compressed data)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(f"{path}: broken gzip data ({exc})") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None


def decode(data: bytes, path: Path) -> WireTrace:
    """The typed top level of a trace, or :class:`TraceError`."""
    if not data.strip():
        raise TraceError(f"{path}: empty file, not a Kineto trace")
    try:
        wire = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path}: not a Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        why = "truncated JSON" if "truncated" in str(exc) else f"not JSON ({exc})"
        raise TraceError(f"{path}: {why}") from None
    if wire.traceEvents is None:
        raise TraceError(f"{path}: not a Kineto trace (no traceEvents list)")
    return wire


def load_timeline(path: Path | str) -> Timeline:
    """Read and type one trace file."""
    path = Path(path)
    wire = decode(read_bytes(path), path)
    events = wire.traceEvents or []
    builder = _Builder()
    builder.add_all(events)
    if not builder.known:
        raise TraceError(f"{path}: not a Kineto trace (none of its {len(events)} events is a PyTorch profiler "
                         "operator, runtime call or GPU activity)")
    dist = wire.distributedInfo
    return Timeline(
        source=str(path), schema="2021" if builder.old else "2022+",
        rank=_number(dist.rank) if dist else None, world_size=_number(dist.world_size) if dist else None,
        backend=(dist.backend or "") if dist else "",
        devices=tuple(_device(d) for d in (wire.deviceProperties or wire.computeProperties or [])),
        gpu=builder.gpu, runtime=builder.runtime, ops=builder.ops, python=builder.python, steps=tuple(sorted(builder.steps, key=lambda s: s.start)),
        gpu_devices=tuple(sorted(builder.gpu_devices)),
    )


def _number(value: object) -> int | None:
    """A metadata number (int, integral float or digit string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _device(d: WireDevice) -> Device:
    name = d.name or ""
    vendor = "amd" if re.search(r"AMD|Instinct|Radeon|\bMI\d{3}", name) else "nvidia" if name else ""
    dev_id = _number(d.id)
    major = _number(d.computeMajor if d.computeMajor is not None else d.major)
    minor = _number(d.computeMinor if d.computeMinor is not None else d.minor)
    return Device(-1 if dev_id is None else dev_id, name, vendor, major, minor, _number(d.totalGlobalMem))


def _as_int(value: object, default: int = -1) -> int:
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
        return np.array([_as_int(v) for v in values], dtype=np.int64)


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


def _table(evs: list[WireEvent], lanes: _Lanes, *, lane: np.ndarray | None = None, kind: np.ndarray | None = None,
           flag: np.ndarray | None = None, device: np.ndarray | None = None, stacks: bool = False) -> Table:
    n = len(evs)
    names: dict[str, int] = {}
    name = np.array([names.setdefault(e.name, len(names)) for e in evs], dtype=np.int32)
    start = np.array([e.ts for e in evs], dtype=np.float64)
    end = start + np.array([e.dur or 0.0 for e in evs], dtype=np.float64)
    args = [e.args for e in evs]
    corr = _ints([a.correlation if a is not None else None for a in args])
    ext = _ints([(a.external_id if a.external_id is not None else a.external_id_2021) if a is not None else None
                 for a in args])
    stack_ids: dict[str, int] = {}
    stack = np.full(n, -1, dtype=np.int32)
    if stacks:
        stack = np.array([stack_ids.setdefault(a.call_stack, len(stack_ids)) if a is not None and a.call_stack else -1
                          for a in args], dtype=np.int32)
    cols = [name, start, end, lanes.column([e.tid for e in evs]) if lane is None else lane, corr,
            np.zeros(n, dtype=np.int8) if kind is None else kind, np.zeros(n, dtype=np.int8) if flag is None else flag,
            np.full(n, -1, dtype=np.int32) if device is None else device, stack, ext]
    order = np.argsort(start, kind="stable")
    cols = [c[order] for c in cols]
    for c in cols:
        c.flags.writeable = False
    return Table(tuple(names), *cols, stacks=tuple(stack_ids))


class _Builder:
    """Events sorted into the four tables and the steps, each table built column by column."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.gpu_devices: set[int] = set()
        self.known = 0
        self.old = False
        self.lanes = _Lanes()
        empty: list[WireEvent] = []
        self.gpu = self.runtime = self.ops = self.python = _table(empty, self.lanes)

    def add_all(self, events: list[WireEvent]) -> None:
        xs = [e for e in events if e.ph == "X" and e.ts is not None and e.cat is not None]
        cats = {e.cat for e in xs}
        self.old = bool(cats & _OLD)
        gpu = [e for e in xs if e.cat in _GPU]
        rt = [e for e in xs if e.cat in _RUNTIME]
        ops = [e for e in xs if e.cat in _OPS]
        py = [e for e in xs if e.cat in _PYTHON]
        self.known = len(gpu) + len(rt) + len(ops)
        steps = [e for e in ops if e.name.startswith("ProfilerStep#") and _STEP.match(e.name)]
        if steps:
            ops = [e for e in ops if not (e.name.startswith("ProfilerStep#") and _STEP.match(e.name))]
        self.steps = [Step(int(e.name[13:]), float(e.ts), float(e.ts) + float(e.dur or 0.0)) for e in steps]
        self.gpu = self._gpu(gpu)
        self.runtime = _table(rt, self.lanes)
        self.ops = _table(ops, self.lanes, stacks=True)
        self.python = _table(py, self.lanes)

    def _gpu(self, evs: list[WireEvent]) -> Table:
        args = [e.args for e in evs]
        stream = _ints([a.stream if a is not None else None for a in args])
        tid = self.lanes.column([e.tid for e in evs])
        device = _ints([a.device if a is not None and a.device is not None else e.pid for e, a in zip(evs, args)])
        self.gpu_devices = set(np.unique(device).tolist())
        kind = np.array([_GPU[e.cat] for e in evs], dtype=np.int8)
        flag = np.array([_copy_flag(e) if k == GPU_MEMCPY else COPY_UNKNOWN for e, k in zip(evs, kind.tolist())],
                        dtype=np.int8)
        return _table(evs, self.lanes, lane=np.where(stream != -1, stream, tid), kind=kind, flag=flag,
                      device=device.astype(np.int32))


def _copy_flag(ev: WireEvent) -> int:
    args = ev.args
    kinds = " ".join(k for k in (ev.name, args.src_kind if args else None, args.dst_kind if args else None) if k)
    if "Pageable" in kinds:
        return COPY_PAGEABLE
    if "Pinned" in kinds:
        return COPY_PINNED
    return COPY_UNKNOWN
