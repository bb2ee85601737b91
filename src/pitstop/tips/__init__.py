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
    raise UnknownTipError(query, _suggest(q))


def _suggest(query: str, limit: int = 6) -> list[str]:
    """Near matches for an unknown query, as ``"PIT301 (mixed-precision)"`` labels.

    A code-like query (``PIT3``, ``PIT3O1``) is compared with codes only: codes it prefixes
    first, then codes one or two characters away. Anything else is compared with slugs:
    slugs containing one of its words first, then close spellings. Unrelated queries get no
    suggestion rather than a random one.
    """
    tips = sorted(_REGISTRY.values(), key=lambda t: t.code)
    if query.upper().startswith("PIT"):
        needle = query.upper()
        hits = [t for t in tips if t.code.startswith(needle)]
        hits += [_REGISTRY[c] for c in difflib.get_close_matches(needle, [t.code for t in tips], n=limit, cutoff=0.8)]
    else:
        needle = query.lower().replace("_", "-").replace(" ", "-")
        words = [w for w in needle.split("-") if len(w) >= 3]
        hits = [t for t in tips if any(w in t.slug for w in words)]
        slugs = {t.slug: t for t in tips}
        hits += [slugs[s] for s in difflib.get_close_matches(needle, list(slugs), n=limit, cutoff=0.6)]
    labels: list[str] = []
    for t in hits:
        label = f"{t.code} ({t.slug})"
        if label not in labels:
            labels.append(label)
    return labels[:limit]
