"""The parent side: start the child bootstrap, enforce the timeout, read the result back.

Torch-free. Lifecycle promises (tested in ``tests/test_doctor_lifecycle.py``):

- The child runs in its own session (process group), so a timeout, Ctrl-C, SIGTERM or SIGHUP
  to the parent kills the script *and* its DataLoader workers, and the run's temporary
  directory is removed (:func:`pitstop.lifecycle.exit_on_signals`: the signal becomes
  ``SystemExit(128 + signum)`` in the parent).
- The child dies with its parent even when the parent is SIGKILLed
  (:func:`pitstop.lifecycle.die_with_parent`: ``PR_SET_PDEATHSIG`` on Linux, a pid watchdog
  elsewhere); a stale temporary directory of a dead parent is removed by the next run.
- The child starts with a safe ``sys.path``: the bootstrap is run with ``-c`` and drops the
  working directory that Python puts first, so a ``json.py`` in the working directory is not
  imported by pitstop; the script then gets exactly what ``python script.py`` gives it (its
  own directory first; the working directory for ``-m``).
- Timeout: the child's watchdog writes a partial report at ``spec.timeout``. A script that
  holds the interpreter lock cannot be stopped that way, so ``GRACE_S`` seconds later the
  parent kills the group and reports ``timeout`` with the steps of the child's last progress
  snapshot. Only a child that is already writing its report (probes, observations) is given
  up to ``FINISH_GRACE_S`` more.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pitstop.doctor.run.oomkill import KillWatch
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord
from pitstop.lifecycle import exit_on_signals, guard_pipe, kill_group, pid_alive, temporary_directory

__all__ = ["run_script", "crashed_result", "GRACE_S", "FINISH_GRACE_S", "EXIT_GRACE_S", "ScriptNotFoundError", "ScriptSyntaxError", "check_target",
           "child_command", "child_env", "PARTIAL_SUFFIX", "FINISHING_SUFFIX"]

#: seconds the parent waits past ``spec.timeout`` for the child's own partial report before
#: killing the process group (a script holding the GIL never lets the child's watchdog run).
GRACE_S = 5.0
#: at most this much longer while the child is writing its report (it said so on disk).
FINISH_GRACE_S = 60.0
#: seconds a child that wrote its whole report gets to exit; then its group is stopped and the
#: report used (a script whose persistent DataLoader workers with pinned memory keep the
#: process alive after its last measured step loses nothing and does not wait for the timeout)
EXIT_GRACE_S = 5.0
#: files next to RESULT.json: the child's progress snapshot, and the marker it creates when it
#: starts writing its report
PARTIAL_SUFFIX, FINISHING_SUFFIX = ".partial", ".finishing"

_TMP_PREFIX = "pitstop-doctor-"
# ``python -c`` puts '' (the working directory) first on sys.path; drop it before importing
# anything, the way ``-P`` / PYTHONSAFEPATH would (but without an environment variable that the
# script's own subprocesses would inherit, and on Python < 3.11 too).
_BOOT = ("import sys; sys.path[:1] == [''] and sys.path.pop(0); "
         "from pitstop.doctor.run.child import main; sys.exit(main())")


class ScriptNotFoundError(FileNotFoundError):
    pass


class ScriptSyntaxError(SyntaxError):
    pass


def check_target(spec: RunSpec) -> None:
    """Fail early, in the parent, on a missing script/module or a syntax error."""
    if spec.script is not None:
        path = Path(spec.script)
        if spec.cwd and not path.is_absolute():
            path = Path(spec.cwd) / path
        if not path.is_file():
            raise ScriptNotFoundError(f"no such script: {spec.script}")
        source = path.read_bytes()
        try:
            compile(source, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise ScriptSyntaxError(f"{exc.filename}:{exc.lineno}:{exc.offset or 0}: {exc.msg}"
                                    + (f"\n    {exc.text.rstrip()}" if exc.text else "")) from None
        except ValueError as exc:  # source with NUL bytes
            raise ScriptSyntaxError(f"{path}: {exc}") from None
    else:
        import importlib.util

        cwd_added = False
        if spec.cwd and spec.cwd not in sys.path:
            sys.path.insert(0, spec.cwd)
            cwd_added = True
        try:
            found = importlib.util.find_spec(spec.module)
        except (ImportError, ValueError):
            found = None
        finally:
            if cwd_added:
                sys.path.remove(spec.cwd)
        if found is None:
            raise ScriptNotFoundError(f"no module named {spec.module!r}")


def child_command(python: str, spec_path: str | Path, result_path: str | Path, guard: int | None = None) -> list[str]:
    """The command line that starts the child bootstrap (safe ``sys.path``, parent pid, and
    the read end of the :func:`pitstop.lifecycle.guard_pipe` when given)."""
    return [python, "-c", _BOOT, str(spec_path), str(result_path), str(os.getpid())] + (
        [str(guard)] if guard is not None else [])


def child_env() -> dict[str, str]:
    """The child's environment: unbuffered output, this pitstop first on ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    src = str(Path(__file__).resolve().parents[2])  # make this pitstop importable in the child
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _remove_stale_tmpdirs() -> None:
    """Temporary directories of runs whose parent was killed (``pitstop-doctor-<pid>-*``)."""
    try:
        entries = list(Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*-*"))
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(_TMP_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _wait(proc: subprocess.Popen, spec: RunSpec, result_path: Path) -> tuple[int, bool]:
    """Wait for the child; returns (returncode, killed_by_the_parent_after_the_timeout)."""
    deadline = None if spec.timeout is None else time.monotonic() + spec.timeout + GRACE_S
    reported = None  # when the whole report was first seen on disk
    while deadline is None or time.monotonic() < deadline:
        try:
            return proc.wait(timeout=0.25), False
        except subprocess.TimeoutExpired:
            pass
        if reported is None and result_path.is_file():
            reported = time.monotonic()
        if reported is not None and time.monotonic() - reported > EXIT_GRACE_S:
            kill_group(proc.pid)  # reported, then did not exit: stopped, the report stands
            return proc.wait(), False
    finishing = Path(str(result_path) + FINISHING_SUFFIX)
    if finishing.exists() and not result_path.exists():
        try:  # the child is writing its report: give it time to finish
            return proc.wait(timeout=FINISH_GRACE_S), False
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc.pid)
    return proc.wait(), True


def _partial(spec: RunSpec, result_path: Path, elapsed: float) -> RunResult:
    """A ``timeout`` result from the child's last progress snapshot (steps done so far)."""
    steps: list[StepRecord] = []
    try:
        data = json.loads(Path(str(result_path) + PARTIAL_SUFFIX).read_text(encoding="utf-8"))
        steps = [StepRecord.from_dict(s) for s in data.get("steps", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return RunResult(spec=spec, status="timeout", steps=steps, elapsed=elapsed,
                     message=(f"timed out after {spec.timeout:g} s ({len(steps)} optimizer steps done); the script did "
                              f"not respond (it may hold the interpreter lock) and was killed {GRACE_S:g} s later"))


def crashed_result(spec: RunSpec, result_path: str | Path, returncode: int, elapsed: float,
                   kills: KillWatch) -> RunResult:
    """The result of a child that died without a report: a likely out-of-memory when the kernel
    killed it while its memory grew (``doctor/run/oomkill.py``), else a crash with its status."""
    oom = kills.record(result_path, returncode)
    if oom is not None:
        return RunResult(spec=spec, status="crashed", elapsed=elapsed, oom=oom, device=oom.device,
                         message=f"the script was {oom.message}")
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    return RunResult(spec=spec, status="crashed", elapsed=elapsed,
                     message=f"the child process died without a report ({how})")


def run_script(spec: RunSpec, *, check: bool = True) -> RunResult:
    """Run ``spec`` in a fresh child process and return what it measured.

    Never raises for the script's own failures: they come back as the result's
    ``status`` (``error``, ``exited``, ``timeout``, ``crashed``, ...). Raises
    :class:`ScriptNotFoundError` / :class:`ScriptSyntaxError` before starting when
    ``check`` is true and the target cannot run at all. SIGTERM/SIGHUP during the run (main
    thread) kill the child's group, remove the temporary files and raise ``SystemExit``.
    """
    if check:
        check_target(spec)
    _remove_stale_tmpdirs()
    with exit_on_signals(), temporary_directory(f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        if spec.script is not None and spec.cwd is None:
            spec = RunSpec.from_dict({**spec.to_dict(), "script": str(Path(spec.script).resolve())})
        spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
        started = time.perf_counter()
        kills = KillWatch()
        guard, keep = guard_pipe()  # the child's group dies when `keep` closes: here, or when this process dies
        proc = None
        try:
            proc = subprocess.Popen(child_command(spec.python, spec_path, result_path, guard), cwd=spec.cwd,
                                    env=child_env(), start_new_session=True, stdin=subprocess.DEVNULL,
                                    pass_fds=(guard,))
            os.close(guard)
            returncode, killed = _wait(proc, spec, result_path)
        except BaseException:  # Ctrl-C, SIGTERM/SIGHUP (SystemExit), anything: leave nothing running
            if proc is not None:  # (a signal during Popen: closing `keep` ends the child's group)
                kill_group(proc.pid)
                proc.wait()
            raise
        finally:
            os.close(keep)
            if proc is None:
                os.close(guard)
        kill_group(proc.pid)  # leftover DataLoader workers of a child that exited abruptly
        elapsed = time.perf_counter() - started
        if result_path.is_file():
            result = RunResult.read(result_path)
        elif killed:
            result = _partial(spec, result_path, elapsed)
        else:
            result = crashed_result(spec, result_path, returncode, elapsed, kills)
        result.returncode = returncode
        return result
