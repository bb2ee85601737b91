"""benchmarks/suite_cpu.py: the plugin that logs each test's CPU and the report that sums it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("suite_cpu", ROOT / "benchmarks" / "suite_cpu.py")
suite_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_cpu)


def test_the_plugin_logs_a_child_process_cpu_under_the_test_that_started_it(tmp_path):
    (tmp_path / "test_spin.py").write_text(
        "import subprocess, sys\n"
        "def test_child():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nend = time.process_time() + 0.3\\n"
        "while time.process_time() < end: pass'], check=True)\n"
        "def test_nothing():\n"
        "    pass\n", encoding="utf-8")
    log = tmp_path / "log"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu", "--cpu-log", str(log),
                          "-p", "no:cacheprovider", "test_spin.py"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "benchmarks"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["id"]: r for r in suite_cpu.load(log)}
    assert set(rows) == {"test_spin.py::test_child", "test_spin.py::test_nothing"}
    assert rows["test_spin.py::test_child"]["children"] >= 0.25  # the child's 0.3 s of CPU, reaped by the test
    assert rows["test_spin.py::test_nothing"]["children"] == 0


def test_the_report_sums_per_module_slowest_first(tmp_path, capsys):
    rows = [{"id": "tests/test_a.py::t1", "wall": 2.0, "self": 0.5, "children": 1.5},
            {"id": "tests/test_b.py::t2", "wall": 9.0, "self": 1.0, "children": 6.0},
            {"id": "tests/test_a.py::t3", "wall": 1.0, "self": 0.2, "children": 0.0}]
    (tmp_path / "cpu-1.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n", encoding="utf-8")
    (tmp_path / "cpu-2.jsonl").write_text(json.dumps(rows[2]) + "\n", encoding="utf-8")
    assert suite_cpu.main([str(tmp_path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("9 CPU-seconds over 3 tests in 2 modules")
    modules = out.split("per module\n", 1)[1].split("\n\n", 1)[0].split()
    assert modules == ["7.0", "tests/test_b.py", "2.2", "tests/test_a.py"]
    assert "tests/test_a.py::t3" not in out  # --top 2


def test_a_broken_log_line_is_named_with_its_file_and_line(tmp_path):
    (tmp_path / "cpu-7.jsonl").write_text('{"id": "x", "wall": 1, "self": 1, "children": 0}\nnot json\n',
                                          encoding="utf-8")
    with pytest.raises(SystemExit, match=r"cpu-7\.jsonl:2: not a JSON line"):
        suite_cpu.load(tmp_path)
