"""The Kineto trace as it lies on disk, only the fields ``pitstop trace`` reads (torch-free).

A Kineto trace is Chrome-trace JSON: ``{"traceEvents": [...], "deviceProperties": [...],
"distributedInfo": {...}, ...}``. These msgspec structs name just the fields the analysis
needs; msgspec's typed decoder skips every other key without building it, so a trace of
hundreds of MB never becomes a Python tree (the raw bytes plus these small structs do).
Values whose type differs between Kineto versions (``tid`` a string in 2021 traces, ``pid``
``"Spans"`` on the trace span, ``bytes`` a string on ROCm runtime calls) are unions.
"""

from __future__ import annotations

import msgspec

__all__ = ["WireArgs", "WireEvent", "WireDevice", "WireDistributed", "WireTrace", "WireTail", "META_FIELDS"]

_Id = int | str | None


class WireArgs(msgspec.Struct, frozen=True, gc=False):
    correlation: _Id = None
    stream: _Id = None
    device: _Id = None
    external_id: _Id = msgspec.field(default=None, name="External id")
    external_id_2021: _Id = msgspec.field(default=None, name="external id")
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    nbytes: int | str | None = msgspec.field(default=None, name="bytes")
    src_kind: str | None = None
    dst_kind: str | None = None
    kind: str | int | None = None
    collective: str | None = msgspec.field(default=None, name="Collective name")


class WireEvent(msgspec.Struct, frozen=True, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: WireArgs | None = None


_Num = int | float | str | None  # metadata: read leniently, a bad value only loses that fact


class WireDevice(msgspec.Struct, frozen=True, gc=False):
    id: _Num = None
    name: str | None = None
    totalGlobalMem: _Num = None  # noqa: N815 (the trace's key)
    computeMajor: _Num = None  # noqa: N815
    computeMinor: _Num = None  # noqa: N815
    major: _Num = None
    minor: _Num = None


class WireDistributed(msgspec.Struct, frozen=True, gc=False):
    backend: str | None = None
    rank: _Num = None
    world_size: _Num = None


class WireTrace(msgspec.Struct, frozen=True, gc=False):
    """The top level; each event stays a raw JSON slice of the file (no copy) until the
    loader decodes it, a chunk at a time, as :class:`WireEvent`."""

    traceEvents: list[msgspec.Raw] | None = None  # noqa: N815
    deviceProperties: list[WireDevice] | None = None  # noqa: N815
    computeProperties: list[WireDevice] | None = None  # noqa: N815
    distributedInfo: WireDistributed | None = None  # noqa: N815
    schemaVersion: int | str | None = None  # noqa: N815


class WireTail(msgspec.Struct, frozen=True, gc=False):
    """The last part of a trace read in windows (:mod:`pitstop.trace.stream`): its last events,
    typed at once, and the top-level keys that follow the ``traceEvents`` list."""

    traceEvents: list[WireEvent] | None = None  # noqa: N815
    deviceProperties: list[WireDevice] | None = None  # noqa: N815
    computeProperties: list[WireDevice] | None = None  # noqa: N815
    distributedInfo: WireDistributed | None = None  # noqa: N815
    schemaVersion: int | str | None = None  # noqa: N815


#: the top-level keys besides ``traceEvents`` (the same in :class:`WireTrace` and :class:`WireTail`)
META_FIELDS = ("deviceProperties", "computeProperties", "distributedInfo", "schemaVersion")
