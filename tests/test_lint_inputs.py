"""Bad input: one clear ``path: cannot parse: ...`` line each, every other file still linted,
exit 2, and nothing written unless its fixed version parses. Also: lint never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
    "deep.py": "expression nested too deeply (RecursionError)",
    "deep_walk.py": "expression nested too deeply for the linter (RecursionError)",
    "huge.py": "over the 2.0 MiB limit",
    "loop_a.py": "Too many levels of symbolic links",
    "loop_b.py": "Too many levels of symbolic links",
}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_bad_file_gets_one_error_line_and_the_rest_is_linted(messy, capsys, jobs):
    before = {p.name: p.read_bytes() for p in messy.iterdir() if not p.is_symlink()}
    code = main(["lint", "--fix", "--unsafe-fixes", "--jobs", jobs, "."])
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


def test_unreadable_file(messy, capsys):
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not stop reads")
    p = messy / "secret.py"
    p.write_text("x = 1\n")
    p.chmod(0)
    main(["lint", "secret.py", "ok.py"])
    assert "secret.py: cannot parse: cannot read: Permission denied" in capsys.readouterr().err


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
    code = main(["lint", "--fix", "t.py"])
    captured = capsys.readouterr()
    assert (tmp_path / "t.py").read_text() == src
    assert "not applied: the fixed file would not compile" in captured.err and code == 1


@pytest.mark.slow
def test_lint_never_imports_torch(tmp_path):
    (tmp_path / "t.py").write_text("import torch\nfor x in loader:\n    x.cuda()\n")
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
