"""The suite's isolation (tests/conftest.py): a test that leaks a child process, an environment
variable, a working directory or a signal handler fails; ``serial`` tests run alone across
pytest-xdist workers; ``free_port`` is free (issue 32)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

LEAKS = '''
import os, signal, subprocess, sys

def test_clean(tmp_path, monkeypatch):
    monkeypatch.setenv("PITSTOP_ISOLATION_OK", "1")
    monkeypatch.chdir(tmp_path)
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_leaks_env():
    os.environ["PITSTOP_ISOLATION_LEAK"] = "1"

def test_leaks_cwd(tmp_path):
    os.chdir(tmp_path)

def test_leaks_handler():
    signal.signal(signal.SIGUSR1, lambda *a: None)

def test_leaks_child():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])

def test_after_the_leaks_all_is_restored():
    assert "PITSTOP_ISOLATION_LEAK" not in os.environ
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
'''

# four tests note when they run; the serial one checks that none ran meanwhile
SERIAL = '''
import os, time
import pytest

def _mark(name, d):
    d.mkdir(exist_ok=True)
    (d / name).touch()
    time.sleep(1.0)
    (d / name).unlink()

@pytest.mark.parametrize("i", range(4))
def test_normal(i, request):
    _mark(f"n{i}", request.config.rootpath / "active")

@pytest.mark.serial
def test_alone(request):
    d = request.config.rootpath / "active"
    d.mkdir(exist_ok=True)
    seen = set(os.listdir(d))
    time.sleep(1.0)
    seen |= set(os.listdir(d))
    assert not seen, seen
'''


def _suite(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(body, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "markers=serial: x",
                           "--rootdir", str(tmp_path), *args, str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_leaking_test_fails_and_the_next_test_starts_clean(tmp_path):
    out = _suite(tmp_path, LEAKS)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "6 passed, 4 errors" in text, text  # 4 of the 6 passed, then failed in teardown
    for name, what in [("env", "changed environment variables (restored now): PITSTOP_ISOLATION_LEAK"),
                       ("cwd", "changed the working directory"), ("handler", "SIGUSR1"),
                       ("child", "left child processes running (killed now)")]:
        line = next(ln for ln in text.splitlines() if f"test_leaks_{name} does not clean up" in ln)
        assert what in line, line


@pytest.mark.slow
def test_a_serial_test_runs_while_no_other_test_runs(tmp_path):
    out = _suite(tmp_path, SERIAL, "-n", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed" in out.stdout


def test_free_port_can_be_bound(free_port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", free_port))
