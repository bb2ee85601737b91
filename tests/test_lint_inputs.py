"""Bad input: one clear ``path: cannot parse: ...`` line each, every other file still linted,
exit 2, and nothing written unless its fixed version parses. Also: lint never imports torch."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pitstop.cli import main

GOOD_WITH_FINDING = "import torch\nstate = torch.load('x.pt')\n"


@pytest.fixture
def messy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = {
        "syntax.py": b"def f(:\n    pass\n",
        "latin1.py": b"x = '\xff\xfe caf\xe9'\n",
        "binary.py": b"\x7fELF\x02\x01\x01\x00\x00\x00",
        "empty.py": b"",
        "deep.py": ("x = " + "+".join(["1"] * 5000) + "\n").encode(),
        "deep_walk.py": ("x = " + "+".join(["1"] * 1500) + "\n").encode(),
        "ok.py": GOOD_WITH_FINDING.encode(),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    line = "y = torch.zeros(3).cuda()  # generated\n"
    (tmp_path / "huge.py").write_text("import torch\n" + line * (5 * 2**20 // len(line) + 1))
    os.symlink("loop_b.py", tmp_path / "loop_a.py")
    os.symlink("loop_a.py", tmp_path / "loop_b.py")
    return tmp_path


EXPECTED_ERRORS = {
    "syntax.py": "SyntaxError: invalid syntax (line 1, column 7)",
    "latin1.py": "not valid utf-8 (byte 0xff at offset 5)",
    "binary.py": "binary file (NUL byte at offset 7)",
    # which stage gives up (CPython's parser, libcst's, or the rules' walk) and its exact words
    # depend on the versions installed (libcst 1.9 parses deeper and the walk stops instead): the
    # behaviour tested is one clear line naming the nesting, the file unlinted and untouched
    "deep.py": "expression nested too deeply",
    "deep_walk.py": "expression nested too deeply",
    "huge.py": "over the 2.0 MiB limit",
    "loop_a.py": "Too many levels of symbolic links",
    "loop_b.py": "Too many levels of symbolic links",
}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_bad_file_gets_one_error_line_and_the_rest_is_linted(messy, capsys, jobs):
    before = {p.name: p.read_bytes() for p in messy.iterdir() if not p.is_symlink()}
    code = main(["lint", "--all", "--preview", "--fix", "--unsafe-fixes", "--jobs", jobs, "."])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.splitlines()
    for name, reason in EXPECTED_ERRORS.items():
        mine = [line for line in lines if line.startswith(f"{name}: cannot parse: ")]
        assert len(mine) == 1 and reason in mine[0], (name, lines)
    assert len(lines) == len(EXPECTED_ERRORS)  # empty.py is valid Python: no error
    assert "ok.py:2:9: PIT404" in out
    after = {p.name: p.read_bytes() for p in messy.iterdir() if not p.is_symlink()}
    assert after == before  # nothing fixable in the good file; bad files never written


@pytest.mark.parametrize("limit", [2000, 20000])
def test_deep_nesting_is_refused_whatever_the_recursion_limit(tmp_path, monkeypatch, capsys, limit):
    # torch.compile (inductor) raises the interpreter's recursion limit to 2000 for the rest of
    # the process; a file linted afterwards must get the same answer as in a fresh process
    (tmp_path / "deep_walk.py").write_text("x = " + "+".join(["1"] * 1500) + "\n")
    (tmp_path / "fine.py").write_text("x = " + "+".join(["1"] * 300) + "\n")
    monkeypatch.chdir(tmp_path)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        code = main(["lint", "--all", "--preview", "--jobs", "1", "deep_walk.py", "fine.py"])
    finally:
        sys.setrecursionlimit(old)
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("deep_walk.py: cannot parse: expression nested too deeply"), err


def test_unreadable_file(messy, capsys, monkeypatch):
    # chmod 0 does not stop root (CI runs as root): make the read itself fail as it would
    # for an ordinary user, so this runs everywhere
    p = messy / "secret.py"
    p.write_text("x = 1\n")
    real_read = Path.read_bytes

    def read_bytes(self):
        if self.name == "secret.py":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    code = main(["lint", "--all", "--preview", "--jobs", "1", "secret.py", "ok.py"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines() == ["secret.py: cannot parse: cannot read: Permission denied"]
    assert "ok.py:2:9: PIT404" in out  # the other file is still linted
    assert "1 file could not be linted" in out and "All checks passed" not in out


def test_summary_counts_files_that_could_not_be_linted(messy, capsys):
    for name in ("ok.py", "huge.py", "deep_walk.py", "loop_a.py", "loop_b.py"):
        (messy / name).unlink()
    (messy / "clean.py").write_text("x = 1\n")
    code = main(["lint", "--all", "--preview", "--jobs", "1", "."])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 4  # syntax, latin1, binary, deep
    assert "All checks passed!" not in out
    assert out.splitlines()[-1] == "4 files could not be linted (the `cannot parse` lines on stderr say why)."
    code = main(["lint", "--all", "--preview", "--diff", "--jobs", "1", "."])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines()[-2:] == [
        "No fixes available.", "4 files could not be linted (the `cannot parse` lines on stderr say why)."]
    code = main(["lint", "--all", "--preview", "--jobs", "1", "clean.py"])
    assert code == 0 and capsys.readouterr().out == "All checks passed!\n"


SYMLINKED = "import torch\na = torch.zeros(3).cuda()\nb = torch.ones(2).cuda()\n"
SYMLINKED_FIXED = 'import torch\na = torch.zeros(3, device="cuda")\nb = torch.ones(2, device="cuda")\n'


def test_fix_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    real = tmp_path / "pkg" / "real.py"
    real.write_text(SYMLINKED)
    real.chmod(0o640)
    os.symlink("pkg/real.py", tmp_path / "link.py")  # relative, into another folder
    os.symlink("link.py", tmp_path / "chain.py")  # a link to a link
    code = main(["lint", "--all", "--preview", "--fix", "chain.py"])
    assert code == 0 and "Fixed 2 errors." in capsys.readouterr().out
    assert os.readlink(tmp_path / "chain.py") == "link.py" and os.readlink(tmp_path / "link.py") == "pkg/real.py"
    assert real.read_text() == SYMLINKED_FIXED
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["chain.py", "link.py", "pkg", "real.py"]  # no temp file left


def test_fix_of_a_folder_with_a_file_and_a_link_to_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.py").write_text(SYMLINKED)
    os.symlink("real.py", tmp_path / "link.py")
    assert main(["lint", "--all", "--preview", "--fix", "--jobs", "1", "."]) == 0
    assert (tmp_path / "link.py").is_symlink() and (tmp_path / "real.py").read_text() == SYMLINKED_FIXED


def test_fix_keeps_the_owner_of_the_file(tmp_path, monkeypatch, capsys):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user; ownership is kept only when allowed")
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "theirs.py"
    p.write_text(SYMLINKED)
    os.chown(p, 4321, 4321)
    main(["lint", "--all", "--preview", "--fix", "theirs.py"])
    assert p.read_text() == SYMLINKED_FIXED and (p.stat().st_uid, p.stat().st_gid) == (4321, 4321)


def test_fix_that_would_not_compile_is_refused(tmp_path, monkeypatch, capsys):
    # a fix inside an f-string would be fine; make one invalid by hand: an edit whose result
    # does not compile must never reach the disk
    from pitstop.lint import runner

    monkeypatch.chdir(tmp_path)
    src = textwrap.dedent("""\
        import torch
        a = torch.zeros(3).cuda()
    """)
    (tmp_path / "t.py").write_text(src)
    real = runner._apply
    monkeypatch.setattr(runner, "_apply", lambda source, fixes: (real(source, fixes)[0] + "def (:\n", 1))
    code = main(["lint", "--all", "--preview", "--fix", "t.py"])
    captured = capsys.readouterr()
    assert (tmp_path / "t.py").read_text() == src
    assert "not applied: the fixed file would not compile" in captured.err and code == 1


@pytest.mark.slow
def test_lint_never_imports_torch(tmp_path):
    (tmp_path / "t.py").write_text("import torch\nfor x in loader:\n    x.cuda()\n    model(x).sum().backward()\n")
    blocker = tmp_path / "block" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('pitstop lint imported torch')\n")
    code = ("import sys, runpy; sys.argv = ['pitstop', 'lint', '--jobs', '1', %r]\n"
            "try:\n    runpy.run_module('pitstop', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert 'torch' not in sys.modules\n    print('exit', e.code)\n") % str(tmp_path / "t.py")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "block") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "exit 1" in proc.stdout and "PIT103" in proc.stdout


def test_a_form_feed_or_line_separator_does_not_break_the_project_scan(tmp_path, monkeypatch, capsys):
    """A form feed (``\\x0c``, common in old GNU-style sources) or U+2028 is a line break for str.splitlines() but
    not for Python or the scan's offsets: the line scan of the project index crashed on such a file (found on
    DeepSpeedExamples, issue 42); every file is still linted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ff.py").write_text("import torch\n\x0c\n# a\u2028comment\ndef helper(x):\n    return x.item()\n\n\n"
                                    "def train(model, loader, opt):\n    for x in loader:\n        model(x.cuda()).sum().backward()\n"
                                    "        opt.step()\n        helper(model(x))\n", encoding="utf-8")
    assert main(["lint", "--isolated", "--preview", "--jobs", "1", "ff.py"]) == 1
    out = capsys.readouterr().out
    assert "ff.py:12:9: PIT201 train -> helper -> item" in out


def test_a_fixed_text_the_walk_would_refuse_is_not_valid_python_for_a_fix():
    """The bar a fixed text clears (``is_valid_python``) is the linter's own parse: a text CPython
    compiles but nested deeper than the walk takes (700 unary minuses) fails it, so a fix that
    produced one would be refused, not written and then reported as unparseable."""
    from pitstop.lint.runner import ParseError, is_valid_python, lint_source, rules_for

    deep = "x = " + "-" * 700 + "1\n"
    compile(deep, "deep.py", "exec")
    with pytest.raises(ParseError, match="nested too deeply"):
        lint_source(deep, "deep.py", rules_for(()))
    assert not is_valid_python(deep)
    assert is_valid_python("x = " + "-" * 10 + "1\n")
