"""The CLI's promises on bad input and unexpected errors (issue 14): one clear line, exit 2
for bad input, exit 1 and a hint for an internal error (the traceback with --verbose)."""

from __future__ import annotations

import os

import pytest

from pitstop.cli import main
from pitstop.cli.tips import TipsCommand


def _boom(self, args):
    raise KeyError("deep inside")


def test_unexpected_exception_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(TipsCommand, "run", _boom)
    assert main(["tips"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "internal error: KeyError" in err and "report" in err and "--verbose" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--verbose", "tips"], ["tips", "--verbose"]])
def test_verbose_shows_the_traceback(monkeypatch, capsys, argv):
    monkeypatch.setattr(TipsCommand, "run", _boom)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "_boom" in err and "internal error: KeyError" in err


# -- bad numbers: exit 2 with one line, before anything runs ----------------------------
@pytest.mark.parametrize("argv", [
    ["tune", "--margin", "-5"], ["tune", "--margin", "50"], ["tune", "--margin", "nan"],
    ["tune", "--budget", "nan"], ["tune", "--budget", "-1"],
    ["tune", "--timeout", "nan"], ["tune", "--timeout", "inf"], ["tune", "--timeout", "1e10"],
    ["doctor", "--timeout", "nan"], ["doctor", "--timeout", "inf"], ["doctor", "--timeout", "1e10"],
])
def test_bad_numbers_are_one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error: --" in err and "Traceback" not in err, err


def _script(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return script, marker


@pytest.mark.parametrize("where", ["dir", "under-file"])
def test_tune_save_recipe_path_is_checked_before_the_search(tmp_path, capsys, where):
    script, marker = _script(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    target = tmp_path / "out.toml" if where == "dir" else tmp_path / "file.txt" / "r.toml"
    if where == "dir":
        target.mkdir()
    assert main(["tune", str(script), "--save-recipe", str(target)]) == 2
    err = capsys.readouterr().err
    assert "--save-recipe" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()  # the search never started


def test_tune_prints_its_results_even_when_saving_the_recipe_fails(tmp_path, capsys, monkeypatch):
    import pitstop.report.tune_terminal as report
    import pitstop.tune.api as tuning
    from pitstop.engine.recipe import Recipe

    class Result:
        def recipe(self):
            return Recipe(seed=1)

    def failing_save(self, path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tuning, "tune_script", lambda **kw: Result())
    monkeypatch.setattr(report, "render_text", lambda result: print("THE RESULTS"))
    monkeypatch.setattr(Recipe, "save", failing_save)
    script, _ = _script(tmp_path)
    assert main(["tune", str(script), "--save-recipe", str(tmp_path / "r.toml")]) == 2
    out, err = capsys.readouterr()
    assert "THE RESULTS" in out
    assert "--save-recipe" in err and "Permission denied" in err and "Traceback" not in err


# -- files that are not what they should be -----------------------------------------------
@pytest.mark.parametrize("name, data", [
    ("bin.json", b"\x00\x01\xff\xfe binary"),
    ("latin1.toml", b"[recipe]\nseed = 1 # caf\xe9\n"),
    ("deep.json", b"[" * 100000 + b"]" * 100000),
    ("deep.toml", b"a = " + b"[" * 100000 + b"]" * 100000 + b"\n"),
])
def test_recipe_on_binary_non_utf8_or_deeply_nested_files(tmp_path, capsys, name, data):
    (tmp_path / name).write_bytes(data)
    assert main(["recipe", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and name in err and "Traceback" not in err, err


@pytest.mark.parametrize("text, message", [
    ("tool = 5\n", "`tool` must be a table"),
    ('[tool]\npitstop = "x"\n', "`tool.pitstop` must be a table"),
    ("[tool.pitstop]\nlint = [1]\n", "`tool.pitstop.lint` must be a table"),
    ("a = " + "[" * 100000 + "]" * 100000 + "\n", "nested too deeply"),
])
def test_lint_with_a_malformed_pyproject(tmp_path, capsys, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "a.py").write_text("x = 1\n")
    assert main(["lint", "--jobs", "1", "."]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and "pyproject.toml" in err, err


@pytest.mark.parametrize("where", ["dir", "under-file"])
def test_lint_output_file_that_cannot_be_written_is_refused_first(tmp_path, capsys, where):
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "a.py").write_text("x = 1\n")
    target = tmp_path if where == "dir" else tmp_path / "f.txt" / "report.json"
    assert main(["lint", "--jobs", "1", str(tmp_path / "a.py"), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "-o/--output-file" in err


def test_lint_output_file_is_written(tmp_path, capsys):
    (tmp_path / "a.py").write_text("import torch\nstate = torch.load('x.pt')\n")
    assert main(["lint", "--all", "--preview", "--jobs", "1", str(tmp_path / "a.py"), "--format", "json", "-o",
                 str(tmp_path / "r.json")]) == 1  # --all: module-level code runs once; PIT404 is a preview rule
    assert '"PIT404"' in (tmp_path / "r.json").read_text()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_lint_skips_a_fifo_named_py_and_says_so(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "sub").mkdir()
    os.mkfifo(tmp_path / "sub" / "named.py")
    assert main(["lint", "--jobs", "1", str(tmp_path), str(tmp_path / "sub" / "named.py")]) == 0  # no hang
    out, err = capsys.readouterr()
    assert "pipe.py: skipped: a FIFO, not a regular file" in err
    assert "named.py: skipped: a FIFO, not a regular file" in err
    assert "0 files linted." in out and "All checks passed" not in out


def test_linting_nothing_says_so(tmp_path, capsys):
    assert main(["lint", "--jobs", "1", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == "0 files linted.\n"


FIXABLE = "import torch\na = torch.zeros(3).cuda()\n"


def test_fix_that_cannot_be_written_is_reported_and_not_counted(tmp_path, capsys, monkeypatch):
    import pitstop.lint.runner as runner

    def read_only(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(runner, "write_atomic", read_only)  # chmod does not stop root: fail the write itself
    (tmp_path / "a.py").write_text(FIXABLE)
    assert main(["lint", "--all", "--fix", "--jobs", "1", str(tmp_path / "a.py")]) == 2
    out, err = capsys.readouterr()
    assert "Fixed" not in out and "cannot write the fixed file: Permission denied" in err
    assert "PIT106" in out or "PIT1" in out  # the finding is still reported
    assert (tmp_path / "a.py").read_text() == FIXABLE


def test_fix_does_not_write_through_a_walked_link_that_leaves_the_folder(tmp_path, capsys, monkeypatch):
    outside = tmp_path / "outside.py"
    outside.write_text(FIXABLE)
    tree = tmp_path / "tree"
    tree.mkdir()
    os.symlink(outside, tree / "link.py")
    (tree / "own.py").write_text(FIXABLE)
    monkeypatch.chdir(tmp_path)
    main(["lint", "--all", "--fix", "--jobs", "1", "tree"])
    out, err = capsys.readouterr()
    assert outside.read_text() == FIXABLE  # untouched
    assert (tree / "own.py").read_text() != FIXABLE  # the file inside the tree was fixed
    assert "link.py: not fixed: a symbolic link to a file outside the linted folder" in err
    assert "link.py:2:" in out  # still linted and reported, like ruff


# -- pitstop docs --------------------------------------------------------------------
def test_docs_removes_only_pages_it_generated(tmp_path, capsys):
    from pitstop.cli.tips import GENERATED

    out = tmp_path / "docs" / "tips"
    out.mkdir(parents=True)
    (out / "my-notes.md").write_text("mine")
    (out / "PIT998.md").write_text("# my own page named like a tip\n")
    (out / "PIT999.md").write_text(GENERATED + "# PIT999 a tip that no longer exists\n")
    assert main(["docs", "--out", str(out)]) == 0
    capsys.readouterr()
    assert (out / "my-notes.md").read_text() == "mine"
    assert (out / "PIT998.md").exists() and not (out / "PIT999.md").exists()
    assert (out / "PIT101.md").read_text().startswith(GENERATED)
    (out / "README.md").write_text("my own index\n")  # not generated: never overwritten
    assert main(["docs", "--out", str(out)]) == 2
    assert "README.md" in capsys.readouterr().err and (out / "README.md").read_text() == "my own index\n"


def test_docs_out_pointing_at_a_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "f.md").write_text("x")
    assert main(["docs", "--out", str(tmp_path / "f.md")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a directory" in err
    assert (tmp_path / "f.md").read_text() == "x"


# -- signals ---------------------------------------------------------------------------
def test_exit_on_signals_turns_sigterm_into_a_clean_exit_and_leaves_ignored_signals_alone():
    import signal

    from pitstop.lifecycle import exit_on_signals

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with exit_on_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            with pytest.raises(SystemExit) as stopped:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode
            assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)
