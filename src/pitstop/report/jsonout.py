"""JSON output: dataclasses, enums, paths and non-finite floats made JSON-safe."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["to_jsonable", "dumps"]


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
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False)
