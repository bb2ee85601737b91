"""The tip catalog: tips, their faces and the lookups (torch-free).

A *tip* is one catalog code (:class:`Tip`, one subclass per ``src/pitstop/tips/pitNNN_*.py``
module). A *face* is one way a tip shows up in pitstop: a lint rule (L), a doctor check (D),
a tuning knob (K), an engine behaviour (E), a benchmark (B), a helper function (H) or a check
over a profiler trace read offline (T).

Each mechanism (``lint/``, ``doctor/``, ``tune/``, ``bench/``, ``trace/``) defines a base class
that derives from :class:`Face`; a tip module subclasses it with ``tip="PIT101"`` and the
subclass lands here by ``__init_subclass__``. No list is kept by hand, and a mechanism never
imports a tip module: it asks :func:`implementations` (which imports every ``tips/pit*.py``
once, lazily) or :func:`get`.

This module sits below the mechanisms and must not import torch: ``pitstop lint`` loads
every tip module.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
import textwrap
from collections import defaultdict
from typing import ClassVar

__all__ = [
    "FACES",
    "Face",
    "implementations",
    "all_implementations",
    "faces_of",
    "Tip",
    "CATEGORIES",
    "CATEGORY_TITLES",
    "SECTIONS",
    "DuplicateTipError",
    "UnknownTipError",
    "load_all",
    "all_tips",
    "get",
]

# -- faces ------------------------------------------------------------------------------

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
    """Registered implementations of ``face`` (catalog loaded), optionally only those of one tip code."""
    if face not in FACES:
        raise ValueError(f"unknown face {face!r}; known: {''.join(FACES)}")
    load_all()
    impls = _IMPLS.get(face, [])
    return [c for c in impls if tip is None or c.tip == tip]


def all_implementations() -> dict[str, list[type[Face]]]:
    load_all()
    return {f: list(_IMPLS.get(f, [])) for f in FACES}


def faces_of(tip: str) -> set[str]:
    """Face letters that have at least one registered class for ``tip`` (L, D, K, B, T)."""
    load_all()
    return {f for f, impls in _IMPLS.items() if any(c.tip == tip for c in impls)}


# -- tips -------------------------------------------------------------------------------

#: Hundreds digit of the code -> category slug (TIPS.md headings).
CATEGORIES: dict[str, str] = {
    "1": "data",
    "2": "sync",
    "3": "precision",
    "4": "memory",
    "5": "optimizer",
    "6": "kernels",
    "7": "distributed",
    "8": "correctness",
    "9": "reproducibility",
}

CATEGORY_TITLES: dict[str, str] = {
    "data": "Data pipeline and transfers",
    "sync": "Host-device syncs and retained graphs",
    "precision": "Precision",
    "memory": "Memory",
    "optimizer": "Optimizer",
    "kernels": "Kernels, shapes and graphs",
    "distributed": "Distributed",
    "correctness": "Correctness of the training math",
    "reproducibility": "Reproducibility, checkpoints and safety",
}

#: Attribute name -> heading, in the fixed order every tip's docs follow (ruff-style).
SECTIONS: dict[str, str] = {
    "what": "What it does",
    "why": "Why it is slow (or wrong)",
    "example": "Example",
    "use_instead": "Use instead",
    "when_not": "When it does not help",
    "references": "References",
}

_CODE = re.compile(r"^PIT[1-9]\d\d$")
_SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_TIPS: dict[str, type[Tip]] = {}


class DuplicateTipError(ValueError):
    pass


class UnknownTipError(LookupError):
    """Raised by :func:`get`; ``suggestions`` holds near matches (codes with their slugs)."""

    def __init__(self, query: str, suggestions: list[str]):
        self.query = query
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown tip {query!r}{hint} (`pitstop tips` lists all codes)")


class Tip:
    """A catalog entry. Subclass it once per code; the subclass registers itself.

    Class attributes (all required unless noted):

    - ``code`` ``PITnnn``, ``slug`` (kebab-case), ``title`` (one line)
    - ``faces``: the faces TIPS.md declares, as letters (``"LDKEB"``)
    - ``seeds``: seed documents the tip comes from (``("002", "003")``; ``()`` = beyond seeds)
    - ``truth``: what is true today where a seed is outdated or wrong ("" if nothing to add)
    - docs: ``what``, ``why``, ``example``, ``use_instead``, ``when_not`` (markdown text) and
      ``references`` (a tuple of citations / URLs)
    - ``engine`` (optional): how ``pitstop.fit``/``make_step`` applies the tip (face E)
    - ``helpers`` (optional): names of public helper functions in ``pitstop`` (face H)
    """

    code: ClassVar[str]
    slug: ClassVar[str]
    title: ClassVar[str]
    faces: ClassVar[str]
    seeds: ClassVar[tuple[str, ...]]
    truth: ClassVar[str] = ""
    what: ClassVar[str]
    why: ClassVar[str]
    example: ClassVar[str]
    use_instead: ClassVar[str]
    when_not: ClassVar[str]
    references: ClassVar[tuple[str, ...]]
    engine: ClassVar[str] = ""
    helpers: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:  # pragma: no cover - tips are records, not objects
        raise TypeError("Tip subclasses are catalog records; do not instantiate them")

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        _validate(cls)
        if cls.code in _TIPS:
            raise DuplicateTipError(f"{cls.code} registered twice: {_TIPS[cls.code].__module__} and {cls.__module__}")
        for other in _TIPS.values():
            if other.slug == cls.slug:
                raise DuplicateTipError(f"slug {cls.slug!r} used by {other.code} and {cls.code}")
        _TIPS[cls.code] = cls

    # -- derived facts -------------------------------------------------------------
    @classmethod
    def category(cls) -> str:
        return CATEGORIES[cls.code[3]]

    @classmethod
    def implemented_faces(cls) -> str:
        """Face letters that exist in code today, in FACES order."""
        have = faces_of(cls.code)
        if cls.engine:
            have.add("E")
        if cls.helpers:
            have.add("H")
        return "".join(f for f in FACES if f in have)

    @classmethod
    def planned_faces(cls) -> str:
        """Declared faces that are not implemented yet: shown as planned, never faked."""
        done = cls.implemented_faces()
        return "".join(f for f in cls.faces if f not in done)

    @classmethod
    def docs(cls) -> dict[str, str]:
        """Section heading -> markdown body, in the fixed order."""
        out = {}
        for attr, heading in SECTIONS.items():
            value = getattr(cls, attr)
            if attr == "references":
                value = "\n".join(f"- {ref}" for ref in value)
            out[heading] = textwrap.dedent(value).strip()
        return out

    @classmethod
    def to_dict(cls) -> dict:
        return {
            "code": cls.code,
            "slug": cls.slug,
            "title": cls.title,
            "category": cls.category(),
            "faces": {
                "declared": list(cls.faces),
                "implemented": list(cls.implemented_faces()),
                "planned": list(cls.planned_faces()),
            },
            "seeds": list(cls.seeds),
            "truth": cls.truth,
            "engine": cls.engine,
            "helpers": list(cls.helpers),
            "docs": cls.docs(),
        }


def _validate(cls: type[Tip]) -> None:
    name = f"{cls.__module__}.{cls.__qualname__}"
    missing = [a for a in ("code", "slug", "title", "faces", "seeds", *SECTIONS) if not hasattr(cls, a)]
    if missing:
        raise TypeError(f"{name}: missing tip attribute(s) {', '.join(missing)}")
    if not _CODE.match(cls.code):
        raise ValueError(f"{name}: code {cls.code!r} is not of the form PITnnn")
    if not _SLUG.match(cls.slug):
        raise ValueError(f"{name}: slug {cls.slug!r} is not kebab-case")
    bad = [f for f in cls.faces if f not in FACES]
    if bad or len(set(cls.faces)) != len(cls.faces):
        raise ValueError(f"{name}: faces {cls.faces!r} must be distinct letters of {''.join(FACES)}")
    for attr in SECTIONS:
        value = getattr(cls, attr)
        if attr == "references":
            if not isinstance(value, tuple) or not value or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{name}: references must be a non-empty tuple of strings")
        elif not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name}: docs section {attr!r} ({SECTIONS[attr]}) is empty")


# -- discovery and lookups --------------------------------------------------------------

_loaded = False


def load_all() -> None:
    """Import every ``pitstop/tips/pit*.py`` module once (idempotent; discovery, not a list)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a tip module may ask the catalog while the others load
    try:
        from pitstop import tips as package

        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name.startswith("pit"):
                importlib.import_module(f"{package.__name__}.{info.name}")
    except BaseException:
        _loaded = False
        raise


def all_tips() -> list[type[Tip]]:
    """Every registered tip, sorted by code."""
    load_all()
    return [_TIPS[c] for c in sorted(_TIPS)]


def get(query: str) -> type[Tip]:
    """Look a tip up by code (any case) or slug; raise :class:`UnknownTipError` otherwise."""
    load_all()
    q = query.strip()
    if q.upper() in _TIPS:
        return _TIPS[q.upper()]
    for tip in _TIPS.values():
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
    tips = sorted(_TIPS.values(), key=lambda t: t.code)
    if query.upper().startswith("PIT"):
        needle = query.upper()
        hits = [t for t in tips if t.code.startswith(needle)]
        hits += [_TIPS[c] for c in difflib.get_close_matches(needle, [t.code for t in tips], n=limit, cutoff=0.8)]
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
