"""pitstop doctor on scripts that fail, hang, exit early, never step, spawn workers, or do not exist.

What the doctor makes of a script's own failure (the outcome, the message, the report's steps,
the exit code ``pitstop doctor`` would exit with) is read from runs forked from the suite's warm
worker (``tests/doctor_warm.py``: the same child bootstrap, the report built as the CLI builds
it). The command line itself stays on the CLI: usage errors, a timeout of the child process, an
exit code and the text report of a failed script, as a user sees them."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow

TINY = str(FIXTURES / "doctor" / "tiny.py")
FAST = ("--steps", "3", "--warmup", "1", "--no-probes")


def doctor_json(cli, *args: str, timeout: float = 240):
    out = cli("doctor", "--format", "json", *args, timeout=timeout)
    return out, (json.loads(out.stdout) if out.stdout.strip() else None)


def _warm(warm_doctor, script: str, *args: str):
    """``pitstop doctor --format json --steps 3 --warmup 1 --no-probes SCRIPT -- ARGS``, forked."""
    return warm_doctor.report(script, *args, steps=3, warmup=1, probes=False, timeout=240)


def test_script_that_raises_shows_traceback_and_what_was_measured(warm_doctor):
    out = _warm(warm_doctor, TINY, "--raise-at", "3")
    d = out.data
    assert out.exit_code == 3, out.stderr
    assert d["outcome"] == "script_failed" and d["status"] == "error"
    assert "RuntimeError: boom at step 3" in d["traceback"]
    assert "tiny.py" in d["traceback"] and "pitstop/doctor" not in d["traceback"]
    assert "runpy" not in d["traceback"]  # "<frozen runpy>" on Python >= 3.11
    # steps 0..2 ran: 1 warmup + 2 observed, measured and reported
    assert d["steps"]["observed"] == 2
    assert len(d["steps"]["records"]) == 3 and all(r["loss"] is not None for r in d["steps"]["records"])
    assert d["step_time"]["median"] > 0
    assert "boom" in out.stderr  # the script's own stderr stays visible


def test_script_that_never_steps_an_optimizer(warm_doctor):
    out = _warm(warm_doctor, TINY, "--no-optimizer", "--steps", "5")
    d = out.data
    assert out.exit_code == 5
    assert d["outcome"] == "nothing"
    assert d["message"].startswith("nothing to diagnose")
    assert "0 optimizer steps" in d["message"] and "5 forward passes" in d["message"]
    assert "tiny: done" in out.stderr  # with --format json the script's stdout goes to stderr


def test_script_that_hangs_is_killed_with_a_partial_report(cli):
    out, d = doctor_json(cli, TINY, *FAST, "--timeout", "15", "--", "--hang-at", "2")
    assert out.returncode == 4
    assert d["outcome"] == "timeout" and "timed out after 15 s" in d["message"]
    # where the script was when the time ran out: the step, the phase, the line (a stack sample)
    hang = next(i for i, t in enumerate(open(TINY, encoding="utf-8").read().splitlines(), 1) if "time.sleep(3600)" in t)
    assert f"in observed step 2 of 3, between the measured phases, at {TINY}:{hang}" in d["message"], d["message"]
    assert d["steps"]["observed"] == 1  # step 0 warmup, step 1 observed, then the hang
    assert len(d["steps"]["records"]) == 2


def test_sys_exit_zero_before_the_planned_steps_gives_a_partial_report(warm_doctor):
    out = _warm(warm_doctor, TINY, "--exit-at", "3")
    d = out.data
    assert out.exit_code == 0
    assert d["status"] == "exited" and "partial report, 2 of 3 planned steps observed" in d["message"]
    assert d["steps"]["observed"] == 2


def test_sys_exit_before_any_observed_step_is_nothing_to_diagnose(warm_doctor):
    out = _warm(warm_doctor, TINY, "--exit-at", "1")
    d = out.data
    assert out.exit_code == 5
    assert "nothing to diagnose" in d["message"] and "sys.exit(0)" in d["message"]


def test_sys_exit_nonzero_is_a_failure(warm_doctor):
    out = _warm(warm_doctor, TINY, "--exit-at", "2", "--exit-code", "7")
    d = out.data
    assert out.exit_code == 3 and d["outcome"] == "script_failed" and "sys.exit(7)" in d["message"]


def test_child_that_dies_without_a_report_is_a_crash(warm_doctor):
    out = _warm(warm_doctor, TINY, "--die-at", "2")
    d = out.data
    assert out.exit_code == 3
    assert d["status"] == "crashed" and "died without a report (exit status 9)" in d["message"]


@pytest.mark.parametrize("spawn", [False, True], ids=["fork", "spawn"])
def test_dataloader_workers_do_not_break_the_instrumentation(warm_doctor, spawn):
    out = _warm(warm_doctor, str(FIXTURES / "doctor" / "workers.py"), *(("--spawn",) if spawn else ()))
    d = out.data
    assert out.exit_code == 0, out.stderr
    assert d["status"] == "stopped" and d["steps"]["observed"] == 3
    loaders = d["observations"]["loaders"]
    assert loaders and loaders[0]["num_workers"] == 2 and loaders[0]["role"] == "train"
    assert d["observations"]["batch_size"] == 32


def test_missing_script_is_a_usage_error(cli, tmp_path):
    out = cli("doctor", str(tmp_path / "nope.py"))
    assert out.returncode == 2
    assert "no such script" in out.stderr and "nope.py" in out.stderr


def test_missing_module_is_a_usage_error(cli):
    out = cli("doctor", "-m", "pitstop.examples.no_such_example")
    assert out.returncode == 2 and "no module named 'pitstop.examples.no_such_example'" in out.stderr


def test_syntax_error_names_file_and_line(cli):
    path = FIXTURES / "doctor" / "syntax_error.py"
    out = cli("doctor", str(path))
    assert out.returncode == 2
    assert f"{path}:3:" in out.stderr and "def broken(:" in out.stderr


def test_bad_options_are_usage_errors(cli):
    assert cli("doctor", TINY, "--steps", "0").returncode == 2
    assert cli("doctor", TINY, "--timeout", "-1").returncode == 2


@pytest.mark.parametrize("option, value, message", [
    ("--html", "/dev/null/x.html", "'/dev/null' is not a directory"),
    ("--trace", "/dev/null/tr", "'/dev/null' is not a directory"),
    ("--html", "{tmp}", "is a directory"),
    ("--trace", "{tmp}/file.txt", "is not a directory"),
])
def test_bad_output_paths_are_input_errors_before_the_script_runs(cli, tmp_path, option, value, message):
    (tmp_path / "file.txt").write_text("x")
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    out, d = doctor_json(cli, *FAST, option, value.format(tmp=tmp_path), str(script))
    assert out.returncode == 2 and d is None
    assert f"error: {option}: " in out.stderr and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not marker.exists()  # the script never started


def test_text_report_does_not_print_the_traceback_twice(cli):
    out = cli("doctor", TINY, *FAST, "--", "--raise-at", "3", timeout=240)
    assert out.returncode == 3, out.stderr
    both = out.stdout + out.stderr
    assert both.count("Traceback (most recent call last)") == 1, both
    assert "RuntimeError: boom at step 3" in out.stdout  # the report names the error
    assert "runpy" not in both
