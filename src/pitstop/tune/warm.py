"""A warm worker for script-mode runs: torch imported once, one ``os.fork`` per run.

Starting a fresh interpreter and importing torch costs seconds per run, most of a short
run. The worker (``python -m pitstop.tune.warm``, started once per search) imports torch
and the doctor's child bootstrap, then serves requests on its stdin: for each run it forks;
the fork child starts its own session (so a timeout kills it *and* its DataLoader workers),
sends its stdout to ``/dev/null`` unless the spec says otherwise and its stderr to a file,
and runs :func:`pitstop.doctor.run.child.run_in_process` -- the same bootstrap as a fresh
``python -m pitstop.doctor.run.child`` process: same seeding, instrumentation, setups, ``runpy``
of the user's script. The worker waits for it with the run's timeout plus the runner's
grace, kills its process group on overrun, and answers with the exit status.

The worker itself never runs a torch operation (a fork after OpenMP or CUDA started would
be unsafe), exits when its stdin closes (the tuner ended), and is used only where ``fork``
exists (Linux, macOS); :class:`WarmRunner` falls back to fresh processes otherwise or when
the worker dies.

Difference from a fresh process, said plainly: torch is already imported when the script
starts, so environment variables the script sets *before* ``import torch`` that torch reads
at import time do not take effect (set them outside the script).
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
from typing import Any

__all__ = ["WarmRunner", "serve"]


def _wait(pid: int, timeout: float | None, result: str) -> tuple[int, bool]:
    """Wait for ``pid`` up to ``timeout`` plus the runner's grace (more while the child is
    writing its report, as :mod:`pitstop.doctor.run.runner` does); then kill its process group. A
    child that wrote its whole report is stopped ``EXIT_GRACE_S`` later (the report stands).
    Returns (exit status as ``subprocess`` reports it, killed after the timeout)."""
    from pitstop.doctor.run.runner import GRACE_S

    deadline = None if timeout is None else time.monotonic() + timeout + GRACE_S
    exited = _exit_signal(pid)  # wakes the wait the moment the child exits (Linux), not at the next poll
    try:
        return _wait_loop(pid, deadline, result, exited)
    finally:
        if exited is not None:
            os.close(exited)


def _exit_signal(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait_loop(pid: int, deadline: float | None, result: str, exited: int | None) -> tuple[int, bool]:
    import select

    from pitstop.doctor.run.runner import EXIT_GRACE_S, FINISH_GRACE_S, FINISHING_SUFFIX

    delay, killed, extended, reported = 0.005, False, False, None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if reported is None and os.path.exists(result):
            reported = time.monotonic()
        if reported is not None and time.monotonic() - reported > EXIT_GRACE_S:
            _killpg(pid)  # it wrote its whole report and did not exit: stopped, the report stands
            _, status = os.waitpid(pid, 0)
            break
        if deadline is not None and time.monotonic() > deadline:
            if not extended and os.path.exists(result + FINISHING_SUFFIX) and not os.path.exists(result):
                deadline, extended = time.monotonic() + FINISH_GRACE_S, True
                continue
            _killpg(pid)
            _, status = os.waitpid(pid, 0)
            killed = True
            break
        if exited is not None:
            select.select([exited], [], [], delay)
        else:
            time.sleep(delay)
        delay = min(0.05, delay * 1.5)
    _killpg(pid)  # leftover DataLoader workers of a child that exited abruptly
    return (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)), killed


def _killpg(pid: int) -> None:
    from pitstop.lifecycle import kill_group

    kill_group(pid)  # the group, and what its members started outside it (setsid)


def _child(request: dict[str, Any], channel: int, guard: tuple[int, int]) -> None:
    """In the fork child: become a session leader, set up stdio, run the bootstrap."""
    code = 0
    try:
        os.close(channel)
        os.close(guard[1])
        os.setsid()
        from pitstop.lifecycle import die_with_parent, guard_group

        die_with_parent(os.getppid())  # the worker gone (killed): this run goes too ...
        guard_group(guard[0])          # ... and so does everything it started (its own session)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        os.dup2(err, 1)  # the bootstrap redirects stdout where the spec says
        os.close(err)
        os.close(null)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as this process
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        from pitstop.doctor.run.child import run_in_process
        from pitstop.doctor.run.spec import RunSpec

        with open(request["spec"], encoding="utf-8") as f:
            spec = RunSpec.from_dict(json.load(f))
        if spec.cwd:
            os.chdir(spec.cwd)
        run_in_process(spec, request["result"])
        _write_packages(request.get("packages"))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _write_packages(path: str | None) -> None:
    """The installed packages this run imported (top-level names of modules loaded from
    site-packages), for the worker to preload before the next forks."""
    if not path:
        return
    names = set()
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None) or ""
        if "." not in name and ("site-packages" in f or "dist-packages" in f):
            names.add(name)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(sorted(names), out)


def _preload(names: list[str]) -> list[str]:
    """Import installed packages in the worker (not the user's own modules: see
    :func:`_write_packages`); a package that fails to import is left to the runs."""
    import importlib

    done = []
    for name in names:
        try:
            importlib.import_module(name)
            done.append(name)
        except BaseException:  # noqa: BLE001 - a package that cannot preload just is not preloaded
            pass
    return done


def _warm_torch() -> None:
    """What the first run of every script would otherwise pay: ``torch._dynamo`` (imported
    by the first optimizer built: seconds) and the optimizer machinery. No tensor op runs."""
    import torch

    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - an install without dynamo just pays it per run
        pass
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def serve(parent: int | None = None) -> int:
    """The worker's loop (``python -m pitstop.tune.warm [PARENT_PID]``): one JSON request
    per stdin line, one JSON answer per stdout line."""
    from pitstop.lifecycle import guard_pipe

    if parent is not None:
        from pitstop.lifecycle import die_with_parent

        die_with_parent(parent)
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path.pop(0)  # as the runner's bootstrap: a script's imports see its own directory, not ours
    out = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing the children print can reach the protocol channel
    os.close(null)
    import torch  # noqa: F401 - the point of the worker: imported once, before any fork

    import pitstop.doctor.run.child  # noqa: F401
    import pitstop.doctor.record.collect  # noqa: F401
    import pitstop.helpers.seed  # noqa: F401
    import pitstop.doctor.record.instrument  # noqa: F401
    import pitstop.tune.child  # noqa: F401
    import pitstop.tune.patch  # noqa: F401

    _warm_torch()
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "preload" in request:
            out.write(json.dumps({"preloaded": _preload(request["preload"])}) + "\n")
            continue
        started = time.perf_counter()
        guard = guard_pipe()  # the run's group ends when the write end closes: after the run, or with this worker
        pid = os.fork()
        if pid == 0:
            _child(request, out.fileno(), guard)
        os.close(guard[0])
        out.write(json.dumps({"started": pid}) + "\n")  # the client can kill the run's group itself
        try:
            code, killed = _wait(pid, request.get("timeout"), request["result"])
        finally:
            os.close(guard[1])
        out.write(json.dumps({"returncode": code, "killed": killed, "elapsed": time.perf_counter() - started,
                              "pid": pid}) + "\n")
    return 0


class WarmRunner:
    """Client side: runs a :class:`pitstop.doctor.run.spec.RunSpec` in the warm worker, with the
    same contract as :func:`pitstop.doctor.run.runner.run_script` (a :class:`RunResult`, never
    raising for the script's own failures). ``stderr_lines`` of the last run: what the
    script wrote to stderr."""

    kind = "warm worker (torch imported once, os.fork per run)"

    def __init__(self, python: str = sys.executable, cwd: str | None = None, env: dict[str, str] | None = None,
                 learn_packages: bool = True):
        """``learn_packages``: after the first run, import into the worker the installed packages
        that run imported, so later forks of the same script skip them (a tune search). Pass
        False for a worker that runs different scripts: one script's packages would otherwise be
        imported before another one starts."""
        self.python, self.cwd, self.env = python, cwd, env
        #: ``OMP_WAIT_POLICY`` of the running worker, which its forks inherit (set when it starts)
        self.omp_wait_policy: str | None = None
        self.proc: subprocess.Popen | None = None
        self.last_stderr: list[str] = []
        self.current: int | None = None  # pid (and process group) of the run in progress
        # after the first run: the packages the worker preloaded ([] when not learning them)
        self.preloaded: list[str] | None = None if learn_packages else []
        # the runner's naming (pitstop-doctor-<pid>-*): a tuner killed outright leaves nothing the next run
        # does not remove
        self.tmp = tempfile.TemporaryDirectory(prefix=f"pitstop-doctor-{os.getpid()}-warm-")

    @staticmethod
    def available() -> bool:
        return hasattr(os, "fork") and sys.platform != "win32"

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1"}
        self.omp_wait_policy = env.get("OMP_WAIT_POLICY")
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen([self.python, "-m", "pitstop.tune.warm", str(os.getpid())], cwd=self.cwd, env=env,
                                text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        ready = proc.stdout.readline()
        if not ready or not json.loads(ready).get("ready"):
            proc.kill()
            proc.wait()
            raise OSError("the warm worker did not start")
        return proc

    def start(self) -> None:
        """Start the worker now (torch imported, ready to fork) rather than at the first run."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()

    def run(self, spec: Any) -> Any:
        from pitstop.lifecycle import exit_on_signals

        with exit_on_signals():
            return self._run(spec)

    def _run(self, spec: Any) -> Any:
        from pitstop.doctor.run.oomkill import KillWatch
        from pitstop.doctor.run.runner import crashed_result
        from pitstop.doctor.run.spec import RunResult, RunSpec

        self.start()
        if spec.script is not None and spec.cwd is None:
            spec = RunSpec.from_dict({**spec.to_dict(), "script": str(Path(spec.script).resolve())})
        with tempfile.TemporaryDirectory(dir=self.tmp.name) as tmp:
            paths = {k: str(Path(tmp) / f"{k}.json") for k in ("spec", "result")}
            paths["stderr"] = str(Path(tmp) / "stderr.txt")
            if self.preloaded is None:
                paths["packages"] = str(Path(tmp) / "packages.json")
            Path(paths["spec"]).write_text(json.dumps(spec.to_dict()), encoding="utf-8")
            started = time.perf_counter()
            kills = KillWatch()
            try:
                self.proc.stdin.write(json.dumps({**paths, "timeout": spec.timeout}) + "\n")
                self.proc.stdin.flush()
                announced = self.proc.stdout.readline()
                self.current = json.loads(announced)["started"] if announced else None
                answer = self.proc.stdout.readline()
                self.current = None
            except (BrokenPipeError, OSError, ValueError, KeyError):
                answer = ""
            except BaseException:  # Ctrl-C, SIGTERM (SystemExit): the worker and its run go now
                self.close(kill=True)
                raise
            if not answer:
                self.close()
                raise OSError("the warm worker died")
            reply = json.loads(answer)
            code = reply["returncode"]
            if self.preloaded is None and Path(paths["packages"]).is_file():
                self._preload(json.loads(Path(paths["packages"]).read_text(encoding="utf-8")))
            err = Path(paths["stderr"])
            self.last_stderr = err.read_text(encoding="utf-8", errors="replace").splitlines() if err.is_file() else []
            if Path(paths["result"]).is_file():
                result = RunResult.read(paths["result"])
            elif reply.get("killed"):
                result = _partial(spec, paths["result"], time.perf_counter() - started)
            else:
                result = crashed_result(spec, paths["result"], code, time.perf_counter() - started, kills)
            result.returncode = code
            return result

    def _preload(self, names: list[str]) -> None:
        self.preloaded = []
        try:
            self.proc.stdin.write(json.dumps({"preload": names}) + "\n")
            self.proc.stdin.flush()
            self.preloaded = json.loads(self.proc.stdout.readline() or "{}").get("preloaded", [])
        except (OSError, ValueError):
            pass

    def close(self, kill: bool = False) -> None:
        """Stop the worker (``kill``: at once, with the run it may be waiting for, whose
        process dies with it)."""
        if self.proc is not None and kill:
            if self.current is not None:
                _killpg(self.current)  # the run and what it started (DataLoader workers)
            _killpg(self.proc.pid)
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _killpg(self.proc.pid)
                self.proc.wait()
            self.proc = None
        self.tmp.cleanup()


def _partial(spec: Any, result: str, elapsed: float) -> Any:
    """A ``timeout`` result from the child's last progress snapshot (the steps done)."""
    from pitstop.doctor.run.runner import PARTIAL_SUFFIX
    from pitstop.doctor.run.spec import RunResult, StepRecord

    steps = []
    try:
        data = json.loads(Path(result + PARTIAL_SUFFIX).read_text(encoding="utf-8"))
        steps = [StepRecord.from_dict(s) for s in data.get("steps", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return RunResult(spec=spec, status="timeout", steps=steps, elapsed=elapsed,
                     message=f"timed out after {spec.timeout:g} s ({len(steps)} optimizer steps done) and was killed")


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else None))
