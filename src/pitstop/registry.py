"""Automatic registration of the faces of tips (torch-free).

A *face* is one way a tip shows up in pitstop: a lint rule (L), a doctor check (D), a
tuning knob (K), an engine behaviour (E), a benchmark (B), a helper function (H) or a check over a
profiler trace read offline (T).
Each mechanism (``lint/``, ``doctor/``, ``tune/``, ``bench/``) defines a base class that
derives from :class:`Face`; a tip module subclasses it with ``tip="PIT101"`` and the
subclass lands here by ``__init_subclass__``. No list is kept by hand, and a mechanism
never imports a specific tip: it asks this registry for the implementations of its face.

This module must not import torch: ``pitstop lint`` loads every tip module.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

__all__ = ["FACES", "Face", "implementations", "faces_of", "all_implementations"]

#: Face letter -> name, in the order TIPS.md lists them.
FACES: dict[str, str] = {
    "L": "lint",
    "D": "doctor",
    "K": "knob",
    "E": "engine",
    "B": "bench",
    "H": "helper",
    "T": "trace",
}

_IMPLS: dict[str, list[type[Face]]] = defaultdict(list)


class Face:
    """Base of every face implementation.

    A mechanism declares ``class Rule(Face, face="L")`` (abstract: no ``tip``); a tip
    module declares ``class MyRule(Rule, tip="PIT101")`` and is registered.
    """

    face: ClassVar[str] = ""
    tip: ClassVar[str] = ""

    def __init_subclass__(cls, *, face: str | None = None, tip: str | None = None, **kw):
        super().__init_subclass__(**kw)
        if face is not None:
            if face not in FACES:
                raise ValueError(f"{cls.__qualname__}: unknown face {face!r}; known: {''.join(FACES)}")
            cls.face = face
        if tip is None:
            cls.tip = ""  # an abstract intermediate class, not registered
            return
        if not cls.face:
            raise TypeError(f"{cls.__qualname__}: tip={tip!r} given but no face declared by a base class")
        if not (len(tip) == 6 and tip.startswith("PIT") and tip[3:].isdigit()):
            raise ValueError(f"{cls.__qualname__}: tip code {tip!r} is not of the form PITnnn")
        cls.tip = tip
        _IMPLS[cls.face].append(cls)


def implementations(face: str, tip: str | None = None) -> list[type[Face]]:
    """Registered implementations of ``face``, optionally only those of one tip code."""
    if face not in FACES:
        raise ValueError(f"unknown face {face!r}; known: {''.join(FACES)}")
    impls = _IMPLS.get(face, [])
    return [c for c in impls if tip is None or c.tip == tip]


def all_implementations() -> dict[str, list[type[Face]]]:
    return {f: list(_IMPLS.get(f, [])) for f in FACES}


def faces_of(tip: str) -> set[str]:
    """Face letters that have at least one registered class for ``tip`` (L, D, K, B)."""
    return {f for f, impls in _IMPLS.items() if any(c.tip == tip for c in impls)}
