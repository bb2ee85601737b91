"""The catalog holds every TIPS.md code, exactly once, with full docs and honest faces."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pitstop
from pitstop import catalog
from pitstop.catalog import SECTIONS

from conftest import FIXTURES, ROOT, parse_tips_spec

SHARED_TIPS = ROOT.parent / "shared" / "TIPS.md"


def test_spec_snapshot_matches_shared_copy():
    if not SHARED_TIPS.is_file():
        pytest.skip(f"{SHARED_TIPS} not present (only in the project's workspace)")
    assert parse_tips_spec(SHARED_TIPS) == parse_tips_spec(FIXTURES / "TIPS.md"), (
        "tests/fixtures/TIPS.md is stale: copy ../shared/TIPS.md over it")


def test_every_code_registered_once_with_slug_and_faces(spec):
    registered = {t.code: t for t in catalog.all_tips()}
    spec_codes = {row.code for row in spec}
    assert spec_codes == set(registered), f"missing {spec_codes - set(registered)}, extra {set(registered) - spec_codes}"
    for row in spec:
        tip = registered[row.code]
        assert tip.slug == row.slug, row.code
        assert set(row.faces) <= set(tip.faces), f"{row.code} declares {tip.faces}, TIPS.md lists {row.faces}"
        expected_seeds = () if "beyond" in row.seeds else tuple(re.findall(r"\b\d{3}\b", row.seeds))
        assert tip.seeds == expected_seeds, f"{row.code}: seeds {tip.seeds} != {expected_seeds}"


def test_every_tip_has_all_doc_sections(spec):
    for tip in catalog.all_tips():
        docs = tip.docs()
        assert list(docs) == list(SECTIONS.values()), tip.code
        for heading, body in docs.items():
            assert len(body) >= 40, f"{tip.code}: section {heading!r} is too thin: {body!r}"
        assert "```python" in docs["Example"], f"{tip.code}: Example has no code block"
        assert "```" in docs["Use instead"] or "pitstop" in docs["Use instead"], tip.code


def test_tips_with_a_truth_note_say_it(spec):
    for row in spec:
        if row.truth:
            assert catalog.get(row.code).truth, f"{row.code}: TIPS.md has a truth note; the tip must state the truth"


def test_faces_are_either_implemented_or_declared_planned():
    for tip in catalog.all_tips():
        done, planned = set(tip.implemented_faces()), set(tip.planned_faces())
        assert not done & planned
        assert set(tip.faces) == (set(tip.faces) & done) | planned, tip.code


def test_face_implementations_point_at_real_tips():
    codes = {t.code for t in catalog.all_tips()}
    for face, impls in catalog.all_implementations().items():
        for impl in impls:
            assert impl.tip in codes, f"{impl.__module__}.{impl.__qualname__} registers face {face} for unknown {impl.tip}"


def test_helper_faces_name_real_public_functions():
    for tip in catalog.all_tips():
        for name in tip.helpers:
            assert name in pitstop.__all__, f"{tip.code}: helper {name} not exported by pitstop"
            assert callable(getattr(pitstop, name))


def test_lookup_by_code_and_slug_and_near_matches():
    assert catalog.get("pit301") is catalog.get("mixed-precision")
    with pytest.raises(catalog.UnknownTipError) as exc:
        catalog.get("PIT30")
    assert any("PIT301" in s for s in exc.value.suggestions)
    with pytest.raises(catalog.UnknownTipError) as exc:
        catalog.get("PIT3O1")  # a typo: letter O for zero
    assert exc.value.suggestions == ["PIT301 (mixed-precision)"]
    with pytest.raises(catalog.UnknownTipError) as exc:
        catalog.get("NOPE")
    assert exc.value.suggestions == []  # no random suggestion for an unrelated word


def test_duplicate_code_is_refused():
    existing = catalog.get("PIT301")
    with pytest.raises(catalog.DuplicateTipError):
        type("Dup", (catalog.Tip,), {**{a: getattr(existing, a) for a in (
            "code", "slug", "title", "faces", "seeds", *SECTIONS)}})


def test_bad_tip_definitions_are_refused():
    base = {"code": "PIT999", "slug": "x-y", "title": "t", "faces": "L", "seeds": (),
            **{a: "some text that is long enough" for a in SECTIONS}, "references": ("ref",)}
    with pytest.raises(ValueError, match="code"):
        type("Bad", (catalog.Tip,), {**base, "code": "PX1"})
    with pytest.raises(ValueError, match="empty"):
        type("Bad", (catalog.Tip,), {**base, "why": "  "})
    with pytest.raises(ValueError, match="faces"):
        type("Bad", (catalog.Tip,), {**base, "faces": "LZ"})


def test_loading_the_catalog_does_not_import_torch():
    code = "import sys, pitstop.catalog as t; t.all_tips(); import pitstop.cli as c; c.build_parser(); " \
           "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_generated_docs_are_up_to_date(cli):
    out = cli("docs", "--check", "--out", str(ROOT / "docs" / "tips"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_tip_modules_define_each_top_level_name_once():
    """Faces share their tip's module namespace: a second `_SIZES` would silently replace the
    first one's value (a lint rule once read a bench's constant that way)."""
    import ast
    from collections import Counter

    tips_dir = ROOT / "src" / "pitstop" / "tips"
    for path in sorted(tips_dir.glob("pit*.py")):
        names: Counter[str] = Counter()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names[node.name] += 1
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        dupes = sorted(n for n, c in names.items() if c > 1)
        assert not dupes, f"{path.name} defines {dupes} more than once"
