"""``pitstop compare --format json``: the comparison as one JSON document."""

from __future__ import annotations

from typing import Any

from pitstop.jsoncodec import dumps

__all__ = ["to_json"]


def to_json(comparison: Any) -> str:
    return dumps(comparison.to_dict())
