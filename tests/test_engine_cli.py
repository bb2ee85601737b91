"""``pitstop recipe``: checks a recipe file, exit 2 with the file and value named on errors."""

from __future__ import annotations

import json


def test_recipe_command_prints_a_valid_file(cli, tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('[recipe]\nprecision = "bf16-mixed"\naccumulate = 4\n')
    out = cli("recipe", str(path), "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["precision"] == "bf16-mixed" and data["accumulate"] == 4 and data["clip_norm"] is None
    text = cli("recipe", str(path))
    assert text.returncode == 0 and "* accumulate" in text.stdout and "2 field(s) differ" in text.stdout


def test_recipe_command_reports_bad_values_with_exit_2(cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"precision": "fp8"}')
    out = cli("recipe", str(path))
    assert out.returncode == 2
    assert "bad.json" in out.stderr and "'fp8'" in out.stderr and "Recipe.precision" in out.stderr
