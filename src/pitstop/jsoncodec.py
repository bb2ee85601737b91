"""Dataclass records <-> JSON values, one generic pair (torch-free).

A record that crosses a process boundary (the doctor's child -> parent) or is written as a
``--format json`` document is a dataclass; :func:`to_json` writes it as plain JSON values
and :func:`from_json` reads it back from its type hints, so no record needs hand-written
per-field code. Field metadata tunes the JSON shape where a record's document predates it:

- ``key``: the JSON key when it is not a Python name (``"class"``);
- ``omit``: a value written as no key at all (``None`` for optional keys, ``0`` for counts);
- ``flatten``: a ``dict`` field whose items are written beside the record's own keys
  (on reading, it collects the keys no other field claims);
- an optional record (``X | None``) is written as ``{}`` when None, and ``{}`` reads as None.

A class may define ``to_dict()`` / ``from_dict(data)`` itself; both functions defer to them.

:func:`dumps` is the one writer of JSON text (files between processes, ``--format json``):
:func:`to_jsonable` makes enums, paths, scalars and non-finite floats JSON-safe.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["to_json", "from_json", "record_to_json", "record_from_json", "KEY", "OMIT_NONE", "OMIT_ZERO", "FLATTEN",
           "to_jsonable", "dumps"]

_UNSET = object()


def KEY(name: str) -> dict[str, Any]:  # noqa: N802 (reads as a constant in field metadata)
    """Field metadata: written under ``name`` in JSON."""
    return {"key": name}


OMIT_NONE: dict[str, Any] = {"omit": None}
OMIT_ZERO: dict[str, Any] = {"omit": 0}
FLATTEN: dict[str, Any] = {"flatten": True}


def to_json(value: Any) -> Any:
    """``value`` as JSON values: dataclasses as objects (see the module docs), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        custom = getattr(type(value), "to_dict", None)
        return custom(value) if custom is not None else record_to_json(value)
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def record_to_json(record: Any) -> dict[str, Any]:
    """The generic JSON object of one dataclass record (no ``to_dict`` hook)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        md = f.metadata
        if "omit" in md and value == md["omit"] and type(value) is type(md["omit"]):
            continue
        if md.get("flatten"):
            out.update(to_json(value))
            continue
        out[md.get("key", f.name)] = {} if value is None and _optional_record(type(record), f.name) else to_json(value)
    return out


def from_json(tp: Any, data: Any) -> Any:
    """``data`` (JSON values) read as type ``tp``: dataclasses, ``list[X]``, ``tuple[X, ...]``,
    ``dict[str, X]``, ``X | None``; anything else is taken as it is."""
    if tp is Any or tp is None or data is None:
        return data
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and dataclasses.is_dataclass(args[0]) and data == {}:
            return None
        return from_json(args[0], data) if len(args) == 1 else data
    if dataclasses.is_dataclass(tp):
        custom = getattr(tp, "from_dict", None)
        return custom(data) if custom is not None else record_from_json(tp, data)
    if origin is list and isinstance(data, list):
        (arg,) = typing.get_args(tp) or (Any,)
        return [from_json(arg, x) for x in data]
    if origin is tuple and isinstance(data, (list, tuple)):
        args = typing.get_args(tp)
        arg = args[0] if args else Any
        return tuple(from_json(arg, x) for x in data)
    if origin is dict and isinstance(data, dict):
        _, arg = typing.get_args(tp) or (Any, Any)
        return {k: from_json(arg, v) for k, v in data.items()}
    return data


def record_from_json(cls: type, data: dict[str, Any] | None) -> Any:
    """The generic reading of one dataclass record (no ``from_dict`` hook); keys the record
    does not know are ignored, missing keys take the field's default."""
    data = data or {}
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    claimed = {f.metadata.get("key", f.name) for f in dataclasses.fields(cls) if not f.metadata.get("flatten")}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.metadata.get("flatten"):
            kwargs[f.name] = from_json(hints[f.name], {k: v for k, v in data.items() if k not in claimed})
            continue
        key = f.metadata.get("key", f.name)
        if key in data:
            kwargs[f.name] = from_json(hints[f.name], data[key])
    return cls(**kwargs)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional_record(cls: type, name: str) -> bool:
    tp = _hints(cls).get(name)
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return len(args) == 1 and dataclasses.is_dataclass(args[0])


def to_jsonable(obj: Any) -> Any:
    """Convert to plain JSON types. NaN and infinities become ``None`` (JSON has neither)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if hasattr(obj, "to_dict") and callable(obj.to_dict) and not isinstance(obj, type):
        obj = obj.to_dict()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return to_jsonable(obj.item())
    return str(obj)


def dumps(obj: Any, indent: int | None = 2) -> str:
    """JSON text of ``obj`` (through :func:`to_jsonable`; never NaN)."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False)
