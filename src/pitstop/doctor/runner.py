"""The parent side: start the child bootstrap, enforce the timeout, read the result back.

Torch-free. The child runs in its own session (process group), so that a timeout can kill
the script *and* its DataLoader workers. The child's own watchdog writes a partial report
at ``spec.timeout``; this side kills the whole group ``GRACE_S`` seconds later if the
child is still there, and turns a missing report into a ``crashed`` result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pitstop.doctor.spec import RunResult, RunSpec

__all__ = ["run_script", "GRACE_S", "ScriptNotFoundError", "ScriptSyntaxError", "check_target"]

#: seconds the parent waits past ``spec.timeout`` (finalization: probes, report) before kill.
GRACE_S = 60.0


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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_script(spec: RunSpec, *, check: bool = True) -> RunResult:
    """Run ``spec`` in a fresh child process and return what it measured.

    Never raises for the script's own failures: they come back as the result's
    ``status`` (``error``, ``exited``, ``timeout``, ``crashed``, ...). Raises
    :class:`ScriptNotFoundError` / :class:`ScriptSyntaxError` before starting when
    ``check`` is true and the target cannot run at all.
    """
    if check:
        check_target(spec)
    with tempfile.TemporaryDirectory(prefix="pitstop-doctor-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        if spec.script is not None and spec.cwd is None:
            spec = RunSpec.from_dict({**spec.to_dict(), "script": str(Path(spec.script).resolve())})
        spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
        cmd = [spec.python, "-m", "pitstop.doctor.child", str(spec_path), str(result_path)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        src = str(Path(__file__).resolve().parents[2])  # make this pitstop importable in the child
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=spec.cwd, env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        limit = None if spec.timeout is None else spec.timeout + GRACE_S
        try:
            returncode = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = proc.wait()
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        _kill_group(proc)  # leftover DataLoader workers of a child that exited abruptly
        if result_path.is_file():
            result = RunResult.read(result_path)
        else:
            how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
            result = RunResult(spec=spec, status="crashed", elapsed=time.perf_counter() - started,
                               message=f"the child process died without a report ({how})")
            if spec.timeout is not None and time.perf_counter() - started >= spec.timeout:
                result.status = "timeout"
                result.message = f"timed out after {spec.timeout:g} s and was killed; no partial report could be written"
        result.returncode = returncode
        return result
