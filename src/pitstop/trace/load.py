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
from collections.abc import Iterable
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
        rank=dist.rank if dist else None, world_size=dist.world_size if dist else None,
        backend=(dist.backend or "") if dist else "",
        devices=tuple(_device(d) for d in (wire.deviceProperties or wire.computeProperties or [])),
        gpu=builder.gpu.table(), runtime=builder.runtime.table(), ops=builder.ops.table(),
        python=builder.python.table(), steps=tuple(sorted(builder.steps, key=lambda s: s.start)),
        gpu_devices=tuple(sorted(builder.gpu_devices)),
    )


def _device(d: WireDevice) -> Device:
    name = d.name or ""
    vendor = "amd" if re.search(r"AMD|Instinct|Radeon|\bMI\d{3}", name) else "nvidia" if name else ""
    dev_id = d.id if isinstance(d.id, int) else int(d.id) if isinstance(d.id, str) and d.id.isdigit() else -1
    major = d.computeMajor if d.computeMajor is not None else d.major
    minor = d.computeMinor if d.computeMinor is not None else d.minor
    return Device(dev_id, name, vendor, major, minor, d.totalGlobalMem)


def _as_int(value: object, default: int = -1) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return default
    return default


class _Columns:
    """Rows of one table gathered as Python lists, turned into read-only arrays once."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.stacks: dict[str, int] = {}
        self.cols: tuple[list, ...] = tuple([] for _ in range(10))

    def add(self, name: str, start: float, end: float, lane: int, corr: int, kind: int = 0,
            flag: int = 0, device: int = -1, stack: str | None = None, external: int = -1) -> None:
        n = self.names.setdefault(name, len(self.names))
        s = self.stacks.setdefault(stack, len(self.stacks)) if stack else -1
        for col, v in zip(self.cols, (n, start, end, lane, corr, kind, flag, device, s, external)):
            col.append(v)

    def table(self) -> Table:
        dtypes = (np.int32, np.float64, np.float64, np.int64, np.int64, np.int8, np.int8, np.int32, np.int32, np.int64)
        arrays = [np.asarray(c, dtype=t) for c, t in zip(self.cols, dtypes)]
        order = np.argsort(arrays[1], kind="stable")
        arrays = [a[order] for a in arrays]
        for a in arrays:
            a.flags.writeable = False
        return Table(tuple(self.names), *arrays, stacks=tuple(self.stacks))


class _Builder:
    def __init__(self) -> None:
        self.gpu, self.runtime, self.ops, self.python = _Columns(), _Columns(), _Columns(), _Columns()
        self.steps: list[Step] = []
        self.gpu_devices: set[int] = set()
        self.lanes: dict[object, int] = {}
        self.known = 0
        self.old = False

    def lane(self, tid: object) -> int:
        if isinstance(tid, int):
            return tid
        if isinstance(tid, str) and tid.isdigit():
            return int(tid)
        return self.lanes.setdefault(tid, -2 - len(self.lanes))

    def add_all(self, events: Iterable[WireEvent]) -> None:
        for ev in events:
            if ev.ph != "X" or ev.ts is None or ev.cat is None:
                continue
            cat = ev.cat
            start = float(ev.ts)
            end = start + float(ev.dur or 0.0)
            args = ev.args
            ext = _as_int(args.external_id if args.external_id is not None else args.external_id_2021) if args else -1
            if cat in _GPU:
                self.known += 1
                self.old |= cat in _OLD
                kind = _GPU[cat]
                stream = _as_int(args.stream) if args else -1
                device = _as_int(args.device) if args and args.device is not None else _as_int(ev.pid)
                self.gpu_devices.add(device)
                flag = _copy_flag(ev) if kind == GPU_MEMCPY else COPY_UNKNOWN
                corr = _as_int(args.correlation) if args else -1
                self.gpu.add(ev.name, start, end, stream if stream != -1 else self.lane(ev.tid), corr, kind, flag, device, external=ext)
            elif cat in _RUNTIME:
                self.known += 1
                self.old |= cat in _OLD
                corr = _as_int(args.correlation) if args else -1
                self.runtime.add(ev.name, start, end, self.lane(ev.tid), corr, external=ext)
            elif cat in _OPS:
                self.known += 1
                self.old |= cat in _OLD
                m = _STEP.match(ev.name)
                if m:
                    self.steps.append(Step(int(m.group(1)), start, end))
                    continue
                self.ops.add(ev.name, start, end, self.lane(ev.tid), -1, stack=args.call_stack if args else None,
                             external=ext)
            elif cat in _PYTHON:
                self.python.add(ev.name, start, end, self.lane(ev.tid), -1)


def _copy_flag(ev: WireEvent) -> int:
    args = ev.args
    kinds = " ".join(k for k in (ev.name, args.src_kind if args else None, args.dst_kind if args else None) if k)
    if "Pageable" in kinds:
        return COPY_PAGEABLE
    if "Pinned" in kinds:
        return COPY_PINNED
    return COPY_UNKNOWN
