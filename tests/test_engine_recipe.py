"""Recipe: validation that repeats the bad value, round trips, JSON/TOML files, torch-free."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from pitstop.engine.recipe import COMPILE_MODES, OPTIMIZER_IMPLS, PRECISIONS, Recipe, RecipeError


@pytest.mark.parametrize("field, value", [
    ("precision", "fp8"),
    ("precision", "bf16"),
    ("accumulate", 0),
    ("accumulate", 2.5),
    ("accumulate", True),
    ("clip_norm", -1.0),
    ("clip_norm", float("nan")),
    ("clip_value", "1.0"),
    ("channels_last", "yes"),
    ("compile", "fast"),
    ("optimizer_impl", "apex"),
    ("cudnn_benchmark", 1),
    ("checkpoint_activations", [""]),
    ("num_workers", -2),
    ("pin_memory", "true"),
    ("prefetch", 0),
    ("seed", -1),
    ("seed", 2**32),
    ("threads", 0),
    ("threads", 1.5),
    ("device", "gpu"),
    ("non_blocking", None),
])
def test_invalid_values_are_refused_with_the_value_repeated(field, value):
    with pytest.raises(RecipeError) as exc:
        Recipe(**{field: value})
    message = str(exc.value)
    assert f"Recipe.{field}" in message
    assert repr(value) in message


@pytest.mark.parametrize("kwargs, words", [
    ({"clip_norm": 1.0, "clip_value": 0.5}, ["clip_norm", "clip_value", "not both"]),
    ({"deterministic": True, "cudnn_benchmark": True}, ["PIT902"]),
    ({"num_workers": 0, "persistent_workers": True}, ["num_workers > 0"]),
    ({"num_workers": 0, "prefetch": 4}, ["prefetch=4", "num_workers > 0"]),
])
def test_conflicting_fields_are_refused(kwargs, words):
    with pytest.raises(RecipeError) as exc:
        Recipe(**kwargs)
    for word in words:
        assert word in str(exc.value)


def test_spellings_are_normalized():
    assert Recipe(compile="off").compile is None
    assert Recipe(compile=True).compile == "default"
    assert Recipe(clip_norm=1).clip_norm == 1.0 and isinstance(Recipe(clip_norm=1).clip_norm, float)
    assert Recipe(checkpoint_activations=["a", "b.*"]).checkpoint_activations == ("a", "b.*")
    assert Recipe(checkpoint_activations="blocks.*").checkpoint_activations == ("blocks.*",)


def test_recipe_is_frozen_and_replace_validates():
    r = Recipe()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.accumulate = 2
    assert r.replace(accumulate=4).accumulate == 4
    with pytest.raises(RecipeError, match="0"):
        r.replace(accumulate=0)
    assert Recipe(precision="bf16-mixed", accumulate=2).changed() == {"precision": "bf16-mixed", "accumulate": 2}


recipes = st.builds(
    Recipe,
    precision=st.sampled_from(PRECISIONS),
    accumulate=st.integers(1, 64),
    clip_norm=st.one_of(st.none(), st.floats(1e-3, 1e3)),
    channels_last=st.booleans(),
    compile=st.one_of(st.none(), st.sampled_from(COMPILE_MODES)),
    optimizer_impl=st.one_of(st.none(), st.sampled_from(OPTIMIZER_IMPLS)),
    checkpoint_activations=st.lists(st.sampled_from(["blocks.0", "blocks.*", "mlp"]), max_size=3).map(tuple),
    num_workers=st.one_of(st.none(), st.integers(1, 8)),
    pin_memory=st.one_of(st.none(), st.booleans()),
    seed=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    device=st.sampled_from(["auto", "cpu", "cuda", "cuda:1"]),
)


@settings(max_examples=60, deadline=None)
@given(recipes)
def test_dict_json_and_toml_round_trip(tmp_path_factory, recipe):
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    assert Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe
    folder = tmp_path_factory.mktemp("r")
    for suffix in (".json", ".toml"):
        path = recipe.save(folder / f"recipe{suffix}")
        assert Recipe.load(path) == recipe, path.read_text()


def test_toml_file_with_a_recipe_table_and_top_level_keys(tmp_path):
    (tmp_path / "a.toml").write_text('[recipe]\nprecision = "bf16-mixed"\naccumulate = 4\n')
    (tmp_path / "b.toml").write_text('precision = "bf16-mixed"\naccumulate = 4\n')
    assert Recipe.load(tmp_path / "a.toml") == Recipe.load(tmp_path / "b.toml") == Recipe(precision="bf16-mixed", accumulate=4)


def test_bad_files_name_the_file_and_the_problem(tmp_path):
    bad_value = tmp_path / "v.toml"
    bad_value.write_text('accumulate = 0\n')
    with pytest.raises(RecipeError, match=r"v\.toml: Recipe\.accumulate must be an int >= 1, got 0"):
        Recipe.load(bad_value)
    typo = tmp_path / "t.json"
    typo.write_text('{"precison": "fp32"}')
    with pytest.raises(RecipeError, match=r"t\.json: unknown recipe field\(s\) 'precison' \(did you mean 'precision'\?\)"):
        Recipe.load(typo)
    broken = tmp_path / "b.json"
    broken.write_text('{\n  "accumulate": 2,\n}')
    with pytest.raises(RecipeError, match=r"b\.json:3:1: invalid JSON"):
        Recipe.load(broken)
    broken_toml = tmp_path / "b.toml"
    broken_toml.write_text('accumulate = = 2\n')
    with pytest.raises(RecipeError, match=r"b\.toml: invalid TOML: .*line 1"):
        Recipe.load(broken_toml)
    with pytest.raises(RecipeError, match=r"r\.yaml: unknown recipe format '\.yaml'"):
        Recipe.load(tmp_path / "r.yaml") if (tmp_path / "r.yaml").write_text("x") else None
    with pytest.raises(RecipeError, match="missing.toml: cannot read recipe"):
        Recipe.load(tmp_path / "missing.toml")


def test_recipe_module_does_not_import_torch():
    code = ("import sys; from pitstop.engine import Recipe; Recipe(precision='bf16-mixed'); "
            "import pitstop.engine.recipe; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
