"""``pitstop tips`` / ``explain``: the catalog from the command line, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from pitstop.catalog import SECTIONS


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


def _place(line: str) -> tuple[str, int]:
    """``face  file:line  name (kind)`` -> (file, line)."""
    loc = line.split()[1]
    file, _, n = loc.rpartition(":")
    return file, int(n)


def test_explain_where_points_at_every_face_class(cli):
    """Every registered face class of a tip is listed at the line that defines it; helpers
    at their ``def``; the engine note at its attribute."""
    from pitstop import catalog
    from pitstop.catalog_locate import locate

    for code in ("PIT101", "PIT104", "PIT503", "PIT703"):
        tip = catalog.get(code)
        places = locate(tip)
        classes = {c.__name__ for face in catalog.FACES for c in catalog.implementations(face, code)}
        assert classes and classes <= {p.name for p in places}, code
        for p in places:
            text = Path(p.file).read_text(encoding="utf-8").splitlines()[p.line - 1]
            if p.face == "test":
                assert p.kind == "lint fixtures" or code in text or code.lower() + "_" in text, (p, text)
            elif p.kind == "note":
                assert text.lstrip().startswith("engine"), (p, text)
            elif p.face == "H":
                assert text.startswith(f"def {p.name.split('.')[-1]}("), (p, text)
            elif p.face == "E":
                assert code in text, (p, text)
            else:
                assert text.startswith(f"class {p.name}("), (p, text)
    kinds = {(p.face, p.kind) for p in locate(catalog.get("PIT104"))}
    assert {("tip", "Tip"), ("D", "Check"), ("D", "Probe"), ("K", "Knob"), ("B", "Benchmark"), ("E", "note")} <= kinds
    assert ("H", "helper") in {(p.face, p.kind) for p in locate(catalog.get("PIT503"))}
    assert ("L", "LintRule") in {(p.face, p.kind) for p in locate(catalog.get("PIT101"))}


def test_explain_where_lists_the_tests_of_a_tip(cli):
    """Per tip, its tests are findable: the lint fixtures, the test functions and tables
    (``EXPECTED`` of the bench runner, ``CASES`` of the doctor checks) that name the code."""
    out = cli("explain", "PIT101", "--where", "--format", "json")
    tests = [p for p in json.loads(out.stdout)["where"] if p["face"] == "test"]
    names = {p["name"] for p in tests}
    assert "tests/fixtures/lint/PIT101/" in names
    assert "test_bench_runner.py::EXPECTED" in names
    assert any(n.startswith("test_lint_cli.py::test_") for n in names)
    assert all(Path(p["file"]).is_file() and p["line"] >= 1 for p in tests)
    text = cli("explain", "PIT101", "--where").stdout
    assert "  test    " in text and "test_bench_runner.py::EXPECTED (test)" in text


def test_explain_where_prints_file_line_per_face(cli):
    out = cli("explain", "PIT104", "--where", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "PIT104 channels-last"
    faces = [line.split()[0] for line in lines[1:] if not line.lstrip().startswith("planned")]
    assert {"tip", "doctor", "knob", "engine", "bench"} <= set(faces)
    for line in lines[1:]:
        file, n = _place(line)
        assert (ROOT / file).is_file() and n >= 1, line  # relative to the working directory
    doctor = [line for line in lines if "ChannelsLastProbe (Probe)" in line]
    assert len(doctor) == 1 and doctor[0].split()[0] == "doctor"
    data = json.loads(cli("explain", "PIT503", "--where", "--format", "json").stdout)
    assert data["code"] == "PIT503"
    assert {(d["face"], d["name"]) for d in data["where"]} >= {("D", "FrozenParamsCheck"), ("H", "pitstop.freeze")}
    assert all(Path(d["file"]).is_absolute() and d["line"] >= 1 for d in data["where"])


def test_explain_where_is_torch_free():
    code = ("import sys; from pitstop.cli import main; import pitstop.catalog as t\n"
            "for tip in t.all_tips(): assert main(['explain', tip.code, '--where']) == 0\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("  tip ") == len(__import__("pitstop.catalog").catalog.all_tips())
