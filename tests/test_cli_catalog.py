"""``pitstop tips`` / ``explain``: the catalog from the command line, as a user runs it."""

from __future__ import annotations

import json

from pitstop.tips import SECTIONS


def test_tips_lists_every_code(cli, spec):
    out = cli("tips")
    assert out.returncode == 0, out.stderr
    for row in spec:
        assert row.code in out.stdout


def test_tips_json_is_complete_and_filterable(cli, spec):
    data = json.loads(cli("tips", "--format", "json").stdout)
    assert {d["code"] for d in data} == {r.code for r in spec}
    for d in data:
        faces = d["faces"]
        assert set(faces["declared"]) <= set(faces["implemented"]) | set(faces["planned"]), d["code"]
        assert not set(faces["implemented"]) & set(faces["planned"]), d["code"]
    precision = json.loads(cli("tips", "--category", "precision", "--format", "json").stdout)
    assert precision and all(d["code"].startswith("PIT3") for d in precision)
    lint = json.loads(cli("tips", "--face", "lint", "--format", "json").stdout)
    assert {d["code"] for d in lint} >= {r.code for r in spec if "L" in r.faces}


def test_unknown_filter_is_a_usage_error(cli):
    out = cli("tips", "--category", "nope")
    assert out.returncode == 2 and "nope" in out.stderr


def test_explain_prints_every_section(cli):
    out = cli("explain", "PIT301")
    assert out.returncode == 0, out.stderr
    for heading in SECTIONS.values():
        assert f"## {heading}" in out.stdout
    assert "PIT301 mixed-precision" in out.stdout


def test_explain_by_slug_and_json(cli):
    data = json.loads(cli("explain", "dataloader-workers", "--format", "json").stdout)
    assert data["code"] == "PIT101" and list(data["docs"]) == list(SECTIONS.values())


def test_explain_unknown_exits_2_with_near_matches(cli):
    out = cli("explain", "NOPE")
    assert out.returncode == 2
    assert "unknown tip 'NOPE'" in out.stderr and "pitstop tips" in out.stderr
    near = cli("explain", "PIT3O1")
    assert near.returncode == 2 and "PIT301" in near.stderr


def test_no_command_prints_help_and_exits_2(cli):
    out = cli()
    assert out.returncode == 2 and "COMMAND" in out.stdout
