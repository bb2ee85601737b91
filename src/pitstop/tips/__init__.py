"""The tip catalog: one module per tip (or small family), discovered automatically.

Every module in this package whose name starts with ``pit`` is imported by
:func:`load_all`; defining a :class:`Tip` subclass registers it, and defining face classes
(lint rules, doctor checks, knobs, benchmarks) registers those into :mod:`pitstop.registry`.
Tip modules import torch only inside their runtime faces, so loading the catalog is
torch-free (``pitstop lint`` depends on that).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

from pitstop.tips._base import CATEGORIES, CATEGORY_TITLES, SECTIONS, Tip, _REGISTRY

__all__ = [
    "Tip",
    "CATEGORIES",
    "CATEGORY_TITLES",
    "SECTIONS",
    "UnknownTipError",
    "load_all",
    "all_tips",
    "get",
]

_loaded = False


class UnknownTipError(LookupError):
    """Raised by :func:`get`; ``suggestions`` holds near matches (codes with their slugs)."""

    def __init__(self, query: str, suggestions: list[str]):
        self.query = query
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown tip {query!r}{hint} (`pitstop tips` lists all codes)")


def load_all() -> None:
    """Import every tip module once (idempotent)."""
    global _loaded
    if _loaded:
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("pit"):
            importlib.import_module(f"{__name__}.{info.name}")
    _loaded = True


def all_tips() -> list[type[Tip]]:
    """Every registered tip, sorted by code."""
    load_all()
    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def get(query: str) -> type[Tip]:
    """Look a tip up by code (any case) or slug; raise :class:`UnknownTipError` otherwise."""
    load_all()
    q = query.strip()
    if q.upper() in _REGISTRY:
        return _REGISTRY[q.upper()]
    for tip in _REGISTRY.values():
        if tip.slug == q.lower():
            return tip
    keys = {t.code: t for t in _REGISTRY.values()} | {t.slug: t for t in _REGISTRY.values()}
    needle = q.upper() if q.upper().startswith("PIT") else q.lower()
    prefixed = sorted(k for k in keys if needle and k.startswith(needle))
    close = prefixed + difflib.get_close_matches(needle, list(keys), n=6, cutoff=0.5)
    seen: list[str] = []
    for k in close[:8]:
        t = keys[k]
        label = f"{t.code} ({t.slug})"
        if label not in seen:
            seen.append(label)
    raise UnknownTipError(query, seen)
