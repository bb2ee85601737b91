"""The :class:`Tip` base class: one subclass per catalog code, registered on definition."""

from __future__ import annotations

import re
import textwrap
from typing import ClassVar

from pitstop.registry import FACES, faces_of

__all__ = ["Tip", "CATEGORIES", "SECTIONS", "DuplicateTipError"]

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
_REGISTRY: dict[str, type[Tip]] = {}


class DuplicateTipError(ValueError):
    pass


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
        if cls.code in _REGISTRY:
            raise DuplicateTipError(f"{cls.code} registered twice: {_REGISTRY[cls.code].__module__} and {cls.__module__}")
        for other in _REGISTRY.values():
            if other.slug == cls.slug:
                raise DuplicateTipError(f"slug {cls.slug!r} used by {other.code} and {cls.code}")
        _REGISTRY[cls.code] = cls

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
