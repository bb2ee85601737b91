"""Read one Kineto trace file into a :class:`~pitstop.trace.model.Timeline` (torch-free).

The decoder is msgspec's typed JSON decoder over the structs of :mod:`pitstop.trace.wire`,
building only the fields named there. The file (or its gzip stream) is read forward a window
of events at a time (:mod:`pitstop.trace.stream`), so memory is the columns plus a few windows,
not the file; a file that reader does not expect (or cannot read) is read whole as before,
which also gives every broken file its one-line error. Every problem
with the file itself (missing, truncated gzip, not JSON, JSON that is not a Kineto trace)
raises :class:`TraceError` with one line that names the file.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import msgspec

from pitstop.trace.columns import EventSorter
from pitstop.trace.model import Device, Timeline
from pitstop.trace.stream import WINDOW, NotStreamable, TraceWindows
from pitstop.trace.wire import WireDevice, WireEvent, WireTail, WireTrace

__all__ = ["TraceError", "load_timeline", "read_windows", "read_whole", "read_bytes", "decode", "TRACE_SUFFIXES",
           "CHUNK"]

TRACE_SUFFIXES = (".json", ".json.gz")

#: events decoded per chunk: bounds the decoded structs alive at once (~0.5 KB each)
CHUNK = 50_000
_DECODER = msgspec.json.Decoder(WireTrace)
_EVENTS = msgspec.json.Decoder(list[WireEvent])


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


def load_timeline(path: Path | str, chunk: int = CHUNK, window: int = WINDOW) -> Timeline:
    """Read and type one trace file: in windows of ``window`` bytes when the file allows
    (:func:`read_windows`), else whole, its events typed ``chunk`` at a time (:func:`read_whole`)."""
    path = Path(path)
    try:
        wire, builder = read_windows(path, window)
    except (NotStreamable, msgspec.DecodeError, OSError, EOFError, zlib.error):
        wire, builder = read_whole(path, chunk)
    if not builder.known:
        raise TraceError(f"{path}: not a Kineto trace (none of its {builder.events} events is a PyTorch profiler "
                         "operator, runtime call or GPU activity)")
    dist = wire.distributedInfo
    return Timeline(
        source=str(path), schema="2021" if builder.old else "2022+",
        rank=_number(dist.rank) if dist else None, world_size=_number(dist.world_size) if dist else None,
        backend=(dist.backend or "") if dist else "",
        devices=tuple(_device(d) for d in (wire.deviceProperties or wire.computeProperties or [])),
        gpu=builder.gpu.table(), runtime=builder.runtime.table(), ops=builder.ops.table(),
        python=builder.python.table(), steps=tuple(sorted(builder.steps, key=lambda s: s.start)),
        gpu_devices=tuple(sorted(builder.gpu_devices)),
    )


def read_windows(path: Path, window: int = WINDOW) -> tuple[WireTail, EventSorter]:
    """The top-level keys and the sorted events of ``path``, read forward a window at a time;
    raises :class:`~pitstop.trace.stream.NotStreamable`, msgspec's or the file's errors."""
    builder = EventSorter()
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        with gzip.GzipFile(fileobj=fh) if gz else fh as src:
            windows = TraceWindows(src, window)
            for events in windows.events():
                builder.add(events)
                del events
    assert windows.meta is not None
    return windows.meta, builder


def read_whole(path: Path, chunk: int = CHUNK) -> tuple[WireTrace, EventSorter]:
    """The top level and the sorted events of ``path``, its bytes read at once and its events
    typed ``chunk`` at a time from their raw slices; every problem is a :class:`TraceError`."""
    wire = decode(read_bytes(path), path)
    raw = wire.traceEvents or []
    builder = EventSorter()
    for first in range(0, len(raw), chunk):
        part = raw[first:first + chunk]
        try:
            events = _EVENTS.decode(b"[" + b",".join(part) + b"]")
        except msgspec.ValidationError as exc:
            where = re.sub(r"\$\[(\d+)\]", lambda m: f"traceEvents[{first + int(m.group(1))}]", str(exc))
            raise TraceError(f"{path}: not a Kineto trace ({where})") from None
        builder.add(events)
        del events, part
    return wire, builder


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
