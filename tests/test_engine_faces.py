"""The engine face (E) of the catalog: every note names real Recipe fields and functions."""

from __future__ import annotations

import dataclasses
import re

import pitstop
import pitstop.engine
from pitstop import catalog
from pitstop.engine import Recipe

FIELDS = {f.name for f in dataclasses.fields(Recipe)}


def _notes():
    return [(t.code, t.engine) for t in catalog.all_tips() if t.engine]


def test_engine_notes_exist_only_for_tips_that_declare_face_e():
    notes = _notes()
    assert len(notes) >= 20
    for code, note in notes:
        assert "E" in catalog.get(code).faces, code
        assert note.endswith(".") and len(note) > 40, code


def test_every_recipe_field_named_in_an_engine_note_exists():
    named = [(code, m) for code, note in _notes() for m in re.findall(r"\bRecipe\.(\w+)", note)]
    assert named, "no engine note names a Recipe field"
    for code, name in named:
        assert name in FIELDS, f"{code}: engine note names Recipe.{name}, which does not exist"


def test_every_pitstop_function_named_in_an_engine_note_exists():
    for code, note in _notes():
        for dotted in re.findall(r"\bpitstop\.((?:engine\.)?\w+)", note):
            obj = pitstop
            for part in dotted.split("."):
                assert hasattr(obj, part), f"{code}: engine note names pitstop.{dotted}, which does not exist"
                obj = getattr(obj, part)
