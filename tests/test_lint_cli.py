"""``pitstop lint`` on the command line: formats, selection, config, suppression, fixes, exit codes."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import jsonschema
import pytest

from pitstop.cli import main

from conftest import FIXTURES

BAD = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(ds, num_workers=0)
    a = torch.zeros(3).cuda()
    state = torch.load("x.pt")
    y = x.permute(1, 0).view(-1)
    model(y).sum().backward()  # the file trains (PIT102 is about code that trains)
''')


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lint(capsys, *args):
    """``pitstop lint --all --preview ARGS``: these tests are about the CLI's mechanics on module-level snippets,
    which run once (hidden by default: see test_one_time_findings_are_hidden_by_default), with every rule (only
    those whose measured precision holds run by default: tests/test_lint_defaults.py)."""
    code = main(["lint", "--all", "--preview", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_output_summary_and_exit_code(project, capsys):
    code, out, err = lint(capsys, "train.py")
    assert code == 1
    lines = out.splitlines()
    assert "train.py:4:10: PIT101 DataLoader loads" in lines[0]
    assert "train.py:5:5: PIT106 [*] " in out  # safe fix: [*]
    assert "train.py:7:5: PIT107 .view()" in out  # unsafe fix: no [*] without --unsafe-fixes
    assert "Found 5 errors." in out and "[*] 1 fixable with the `--fix` option (1 hidden fix" in out
    assert "pitstop explain CODE" in out and "PIT106" in out.splitlines()[-1]


def test_json_output_fields(project, capsys):
    code, out, _ = lint(capsys, "--format", "json", "train.py")
    data = json.loads(out)
    assert code == 1 and len(data) == 5
    f = next(d for d in data if d["code"] == "PIT106")
    assert f["name"] == "create-on-device" and f["filename"] == "train.py"
    assert (f["line"], f["column"], f["end_line"], f["end_column"]) == (5, 5, 5, 26)
    # the pointer works wherever pitstop is installed; no repo-relative docs/tips/... path
    assert f["doc"] == "pitstop explain PIT106" and "url" not in f
    assert f["fix"]["applicability"] == "safe" and f["fix"]["edits"][0]["content"] == 'torch.zeros(3, device="cuda")'
    assert next(d for d in data if d["code"] == "PIT101")["fix"] is None


def test_sarif_output_is_valid_against_the_official_schema(project, capsys):
    (project / "broken.py").write_text("def f(:\n")
    code, out, err = lint(capsys, "--format", "sarif", ".")
    doc = json.loads(out)
    schema = json.loads((FIXTURES / "lint" / "sarif" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.validate(doc, schema)
    run = doc["runs"][0]
    assert code == 2 and len(run["results"]) == 5
    assert {r["ruleId"] for r in run["results"]} <= {d["id"] for d in run["tool"]["driver"]["rules"]}
    assert run["invocations"][0]["executionSuccessful"] is False
    assert run["tool"]["driver"]["rules"][0]["help"]["text"].startswith("pitstop explain PIT")
    assert "example.invalid" not in out  # no address that leads nowhere
    bad = dict(doc)
    bad["version"] = "2.0.0"
    with pytest.raises(jsonschema.ValidationError):  # the schema really checks
        jsonschema.validate(bad, schema)


def test_github_annotations(project, capsys):
    _, out, _ = lint(capsys, "--format", "github", "train.py")
    first = out.splitlines()[0]
    assert first.startswith("::error title=pitstop (PIT101),file=train.py,line=4,col=10,")
    assert first.endswith("::train.py:4:10: PIT101 DataLoader loads batches in the training process (num_workers=0); set num_workers")


def test_select_ignore_prefix_and_specificity(project, capsys):
    _, out, _ = lint(capsys, "--select", "PIT1", "-q", "train.py")
    assert {line.split()[1] for line in out.splitlines()} == {"PIT101", "PIT102", "PIT106", "PIT107"}
    _, out, _ = lint(capsys, "--select", "PIT1", "--ignore", "PIT10", "--extend-select", "PIT404", "-q", "train.py")
    assert {line.split()[1] for line in out.splitlines()} == {"PIT404"}
    _, out, _ = lint(capsys, "--ignore", "PIT1", "--select", "PIT106", "-q", "train.py")  # more specific wins
    assert {line.split()[1] for line in out.splitlines()} == {"PIT106"}


@pytest.mark.parametrize("args", [["--select", "PIT999"], ["--ignore", "PIT104"], ["--select", "XYZ"]])
def test_unknown_codes_are_usage_errors(project, capsys, args):
    code, out, err = lint(capsys, *args, "train.py")
    assert code == 2 and "unknown rule selector" in err and out == ""


def test_pyproject_config_select_ignore_per_file(project, capsys):
    (project / "pyproject.toml").write_text(textwrap.dedent('''\
        [tool.pitstop.lint]
        select = ["PIT1", "PIT4"]
        ignore = ["PIT107"]
        [tool.pitstop.lint.per-file-ignores]
        "scripts/*.py" = ["PIT4"]
    '''))
    (project / "scripts").mkdir()
    (project / "scripts" / "s.py").write_text(BAD)
    _, out, _ = lint(capsys, "-q", ".")
    got = sorted((line.split(":")[0], line.split()[1]) for line in out.splitlines())
    assert got == [("scripts/s.py", "PIT101"), ("scripts/s.py", "PIT102"), ("scripts/s.py", "PIT106"),
                   ("train.py", "PIT101"), ("train.py", "PIT102"), ("train.py", "PIT106"), ("train.py", "PIT404")]
    (project / "pyproject.toml").write_text('[tool.pitstop.lint]\nignore = ["PIT42"]\n')
    code, _, err = lint(capsys, ".")
    assert code == 2 and "PIT42" in err and "pyproject.toml" in err
    (project / "pyproject.toml").write_text('[tool.pitstop.lint]\nselct = ["PIT1"]\n')
    code, _, err = lint(capsys, ".")
    assert code == 2 and "unknown key" in err
    code, out, _ = lint(capsys, "--isolated", "-q", "train.py")  # --isolated ignores the broken config
    assert code == 1 and len(out.splitlines()) == 5


def test_pyproject_exclude_and_extend_exclude(project, capsys):
    """ruff's semantics: ``extend-exclude`` adds gitignore-style patterns (relative to the
    pyproject's folder) to the default skips, ``exclude`` replaces them; a file or folder named
    on the command line is still linted unless ``--force-exclude``."""
    for rel in ("vendor/lib.py", "sub/vendor/deep.py", "data/gen/g.py", "build/b.py", "src/keep.py"):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(BAD)

    def shown(*args):
        code, out, err = lint(capsys, "--show-files", *args)
        assert code == 0, err
        return sorted(out.split())

    assert shown(".") == ["data/gen/g.py", "src/keep.py", "sub/vendor/deep.py", "train.py", "vendor/lib.py"]
    (project / "pyproject.toml").write_text('[tool.pitstop.lint]\nextend-exclude = ["vendor", "/data/gen"]\n')
    assert shown(".") == ["src/keep.py", "train.py"]  # build/ stays skipped: extend keeps the defaults
    assert shown("vendor/lib.py", "data/gen") == ["data/gen/g.py", "vendor/lib.py"]  # named explicitly
    assert shown("--force-exclude", "vendor/lib.py", "data/gen", "train.py") == ["train.py"]
    (project / "pyproject.toml").write_text('[tool.pitstop.lint]\nexclude = ["src/"]\n')
    assert shown(".") == ["build/b.py", "data/gen/g.py", "sub/vendor/deep.py", "train.py", "vendor/lib.py"]
    (project / "sub" / "pyproject.toml").write_text("")
    sub = project / "sub"  # patterns are relative to the pyproject's folder, not to the folder linted
    (project / "pyproject.toml").write_text('[tool.pitstop.lint]\nextend-exclude = ["/vendor"]\n')
    code, out, _ = lint(capsys, "--show-files", "--config", str(project / "pyproject.toml"), str(sub))
    assert code == 0 and "deep.py" in out  # /vendor is anchored at the project root, not sub/


@pytest.mark.parametrize("value", ['"vendor"', "[1]", "{a = 1}"])
@pytest.mark.parametrize("key", ["exclude", "extend-exclude"])
def test_pyproject_exclude_bad_type_is_one_line_usage_error(project, capsys, key, value):
    (project / "pyproject.toml").write_text(f"[tool.pitstop.lint]\n{key} = {value}\n")
    code, out, err = lint(capsys, ".")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "pyproject.toml" in err and key in err


def test_noqa_comments(project, capsys):
    src = BAD.replace("num_workers=0)", "num_workers=0)  # noqa").replace(
        '"x.pt")', '"x.pt")  # noqa: PIT101, PIT404').replace(".view(-1)", ".view(-1)  # noqa: PIT101")
    (project / "train.py").write_text(src)
    _, out, _ = lint(capsys, "-q", "train.py")
    assert sorted(line.split()[1] for line in out.splitlines()) == ["PIT106", "PIT107"]
    (project / "train.py").write_text("#!/usr/bin/env python\n# pitstop: noqa\n" + BAD)
    code, out, _ = lint(capsys, "train.py")
    assert code == 0 and "All checks passed!" in out
    (project / "train.py").write_text("# pitstop: noqa: PIT101\n" + BAD)
    _, out, _ = lint(capsys, "-q", "train.py")
    assert "PIT101" not in out and "PIT404" in out


def test_fix_writes_safe_fixes_only_and_is_idempotent(project, capsys):
    code, out, _ = lint(capsys, "--fix", "train.py")
    fixed = (project / "train.py").read_text()
    assert 'torch.zeros(3, device="cuda")' in fixed and "use_reentrant" not in fixed
    assert ".view(-1)" in fixed  # unsafe: untouched
    assert code == 1 and "Fixed 1 error." in out and "Found 4 remaining errors." in out
    lint(capsys, "--fix", "train.py")
    assert (project / "train.py").read_text() == fixed
    code, out, _ = lint(capsys, "--fix", "--unsafe-fixes", "train.py")
    assert ".reshape(-1)" in (project / "train.py").read_text()
    code, out, _ = lint(capsys, "--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", "train.py")
    assert code == 1 and "Fixed" not in out


def test_diff_prints_and_writes_nothing(project, capsys):
    code, out, err = lint(capsys, "--diff", "train.py")
    assert code == 1 and (project / "train.py").read_text() == BAD
    assert '-a = torch.zeros(3).cuda()\n+a = torch.zeros(3, device="cuda")' in out
    assert "Would fix 1 error in 1 file." in err


def test_exit_zero_statistics_and_output_file(project, capsys):
    code, out, _ = lint(capsys, "--exit-zero", "--statistics", "-q", "train.py")
    assert code == 0 and out.splitlines()[0].split("\t")[1:] == ["PIT101", "[ ] dataloader-workers"]
    code, out, _ = lint(capsys, "--format", "json", "-o", "report.json", "train.py")
    assert out == "" and len(json.loads((project / "report.json").read_text())) == 5


def test_discovery_skips_git_venv_build_and_gitignored(project, capsys):
    for d in (".git", "build", "env", "data", "pkg/sub"):
        (project / d).mkdir(parents=True)
        (project / d / "x.py").write_text(BAD)
    (project / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (project / ".gitignore").write_text("data/\n*_gen.py\n!keep_gen.py\n")
    (project / "pkg" / ".gitignore").write_text("sub/\n")
    (project / "a_gen.py").write_text(BAD)
    (project / "keep_gen.py").write_text(BAD)
    code, out, _ = lint(capsys, "--show-files")
    assert sorted(out.split()) == ["keep_gen.py", "train.py"]
    code, out, _ = lint(capsys, "--show-files", "data/x.py", "pkg")  # named files are always linted
    assert out.split() == ["data/x.py"]


def test_missing_path_is_an_error(project, capsys):
    code, out, err = lint(capsys, "nope.py", "train.py")
    assert code == 2 and "nope.py: cannot parse: cannot read: No such file or directory" in err and "train.py:4:10" in out


def test_pre_commit_hooks_run_pitstop_lint(project, capsys):
    text = (Path(__file__).parents[1] / ".pre-commit-hooks.yaml").read_text()
    entries = re.findall(r"^  entry: (.+)$", text, flags=re.M)
    assert re.findall(r"^- id: (\S+)$", text, flags=re.M) == ["pitstop-lint", "pitstop-lint-fix"]
    assert len(entries) == 2 and re.findall(r"^  types: \[python\]$", text, flags=re.M)
    (project / "build").mkdir()
    (project / "build" / "gen.py").write_text(BAD)
    for entry in entries:  # pre-commit appends the staged file names to the entry
        argv = entry.split()
        assert argv[:2] == ["pitstop", "lint"]
        code, out, _ = lint(capsys, *argv[2:], "build/gen.py")
        assert code == 0 and "build/gen.py" not in out  # --force-exclude honours the excludes
