"""The parent side of ``pitstop doctor --nproc-per-node N``: launch the job with
``torch.distributed.run`` and read back one result per rank (torch-free).

The command is torchrun's own (``python -c <boot> PARENT_PID --nproc-per-node N ...
--no-python python -c <rank boot> SPEC.json DIR``): its environment variables, its
rendezvous (``--standalone``, the loopback address, unless ``--rdzv-endpoint`` is given),
its worker monitoring (a rank that fails ends the others). Each rank runs the doctor's
child (:mod:`pitstop.doctor.run.rank`) and writes ``DIR/rank<R>.json``.

Lifecycle (tested in ``tests/test_doctor_ddp.py``):

- the agent dies with this process (``die_with_parent`` in its boot) and each rank dies
  with its agent; every rank is its own session (torchrun starts it so) and writes its pid,
  so the parent kills the agent's group and every rank's group (DataLoader workers included)
  whatever happens;
- Ctrl-C / SIGTERM / SIGHUP: each rank gets SIGTERM (it unwinds and writes what it measured),
  up to ``STOP_GRACE_S`` later everything is killed, and the job's result is ``interrupted``
  with the ranks' partial reports (or their progress snapshots);
- a job whose ranks all wrote their reports but do not exit (persistent DataLoader workers can
  keep a process alive) is stopped ``EXIT_GRACE_S`` later, the reports kept;
- ``--timeout``: each rank's watchdog writes a ``timeout`` report (naming the collective it
  was waiting in); a rank that does not answer is killed ``JOB_GRACE_S`` later and its last
  progress snapshot is used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pitstop.doctor.run.rank import pid_path, result_path
from pitstop.doctor.run.runner import EXIT_GRACE_S, FINISH_GRACE_S, FINISHING_SUFFIX, PARTIAL_SUFFIX, check_target, child_env
from pitstop.doctor.run.spec import RunResult, RunSpec, StepRecord
from pitstop.lifecycle import exit_on_signals, kill_group, temporary_directory

__all__ = ["JobResult", "run_job", "agent_command", "STOP_GRACE_S", "JOB_GRACE_S"]

#: seconds the ranks get to write their reports after Ctrl-C / SIGTERM
STOP_GRACE_S = 10.0
#: seconds past ``spec.timeout`` before the parent kills a job whose ranks did not report
#: (the ranks' clocks start after the agent and torch are imported)
JOB_GRACE_S = 15.0

_AGENT_BOOT = ("import sys; sys.path[:1] == [''] and sys.path.pop(0); "
               "from pitstop.lifecycle import die_with_parent; die_with_parent(int(sys.argv.pop(1))); "
               "from torch.distributed.run import main; main()")
_RANK_BOOT = ("import sys; sys.path[:1] == [''] and sys.path.pop(0); "
              "from pitstop.doctor.run.rank import main; sys.exit(main())")
_TMP_PREFIX = "pitstop-doctor-"


@dataclass
class JobResult:
    """One result per rank (rank order) and how the job as a whole ended."""

    spec: RunSpec
    results: list[RunResult] = field(default_factory=list)
    status: str = "stopped"      # "stopped", "interrupted", "timeout", "failed", "crashed"
    message: str = ""
    returncode: int | None = None
    signum: int | None = None    # the signal that interrupted the job
    elapsed: float = 0.0


def agent_command(spec: RunSpec, spec_path: Path, directory: Path) -> list[str]:
    """torchrun's command line for ``spec`` (the ranks' boot after ``--no-python``)."""
    cmd = [spec.python, "-c", _AGENT_BOOT, str(os.getpid()), "--nproc-per-node", str(spec.nproc_per_node),
           "--nnodes", spec.nnodes, "--node-rank", str(spec.node_rank), "--max-restarts", "0"]
    if spec.rdzv_endpoint:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", spec.rdzv_endpoint, "--rdzv-id", "pitstop-doctor"]
    else:
        cmd += ["--standalone"]
    return cmd + ["--no-python", spec.python, "-c", _RANK_BOOT, str(spec_path), str(directory)]


def _rank_pids(directory: Path) -> dict[int, int]:
    out = {}
    for p in directory.glob("rank*.pid"):
        try:
            out[int(p.stem[4:])] = int(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    return out


def _kill_all(agent: subprocess.Popen, directory: Path) -> None:
    for pid in _rank_pids(directory).values():
        kill_group(pid)
    kill_group(agent.pid)


def _signal_ranks(directory: Path, sig: int) -> None:
    for pid in _rank_pids(directory).values():
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_reports(agent: subprocess.Popen, directory: Path, seconds: float) -> None:
    """Until every rank that started has written its report or the agent ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and agent.poll() is None:
        pids = _rank_pids(directory)
        if pids and all(result_path(directory, r).is_file() for r in pids):
            return
        time.sleep(0.1)


def _wait(agent: subprocess.Popen, spec: RunSpec, directory: Path) -> bool:
    """Wait for the agent; True when the parent had to kill the job after the timeout."""
    deadline = None if spec.timeout is None else time.monotonic() + spec.timeout + JOB_GRACE_S
    reported = None  # when every local rank's whole report was first seen on disk
    while deadline is None or time.monotonic() < deadline:
        try:
            agent.wait(timeout=0.25)
            return False
        except subprocess.TimeoutExpired:
            pass
        pids = _rank_pids(directory)
        if reported is None and len(pids) >= (spec.nproc_per_node or 1) and all(
                result_path(directory, r).is_file() for r in pids):
            reported = time.monotonic()
        if reported is not None and time.monotonic() - reported > EXIT_GRACE_S:
            return False  # every rank reported and the job did not exit: run_job stops it, the reports stand
    finishing = [Path(str(result_path(directory, r)) + FINISHING_SUFFIX) for r in _rank_pids(directory)]
    if any(f.exists() for f in finishing):
        try:
            agent.wait(timeout=FINISH_GRACE_S)
            return False
        except subprocess.TimeoutExpired:
            pass
    return True


def _read(spec: RunSpec, directory: Path, rank: int, status: str, message: str, elapsed: float) -> RunResult:
    path = result_path(directory, rank)
    if path.is_file():
        try:
            return RunResult.read(path)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    steps: list[StepRecord] = []
    try:
        data = json.loads(Path(str(path) + PARTIAL_SUFFIX).read_text(encoding="utf-8"))
        steps = [StepRecord.from_dict(s) for s in data.get("steps", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return RunResult(spec=spec, status=status, steps=steps, elapsed=elapsed, message=message)


def run_job(spec: RunSpec, *, check: bool = True) -> JobResult:
    """Run ``spec`` (``nproc_per_node`` set) under torchrun; never raises for the script's
    failures (see the module docstring for interruptions and timeouts)."""
    if spec.nproc_per_node is None:
        raise ValueError("run_job needs spec.nproc_per_node")
    if check:
        check_target(spec)
    if spec.script is not None and spec.cwd is None:
        spec = RunSpec.from_dict({**spec.to_dict(), "script": str(Path(spec.script).resolve())})
    spec = RunSpec.from_dict({**spec.to_dict(), "probes": False})  # probes would run collectives on one rank
    job = JobResult(spec=spec)
    with exit_on_signals(), temporary_directory(f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        directory = Path(tmp)
        spec_path = directory / "spec.json"
        spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
        started = time.perf_counter()
        agent = subprocess.Popen(agent_command(spec, spec_path, directory), cwd=spec.cwd, env=child_env(),
                                 start_new_session=True, stdin=subprocess.DEVNULL)
        killed = False
        try:
            killed = _wait(agent, spec, directory)
        except (KeyboardInterrupt, SystemExit) as exc:
            job.signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else (
                exc.code - 128 if isinstance(exc.code, int) and exc.code > 128 else signal.SIGTERM)
            _signal_ranks(directory, signal.SIGTERM)
            _wait_reports(agent, directory, STOP_GRACE_S)
            job.status, job.message = "interrupted", f"interrupted by signal {job.signum}: partial report"
        finally:
            _kill_all(agent, directory)
            agent.wait()
        job.returncode = agent.returncode
        job.elapsed = time.perf_counter() - started
        ranks = sorted(set(_rank_pids(directory)) | {int(p.stem[4:]) for p in directory.glob("rank*.json")
                                                     if p.stem[4:].isdigit()})
        if killed:
            job.status = "timeout"
            job.message = f"timed out after {spec.timeout:g} s; ranks that did not answer were killed"
        missing = "interrupted" if job.status == "interrupted" else ("timeout" if killed else "crashed")
        why = {"interrupted": "interrupted before it wrote a report", "timeout": "killed after the timeout",
               "crashed": f"the rank died without a report (torchrun exit status {job.returncode})"}[missing]
        job.results = [_read(spec, directory, r, missing, why, job.elapsed) for r in ranks]
        if not job.results:
            job.status = "crashed"
            job.message = (f"torchrun started no rank (exit status {job.returncode}); "
                           "its own error is printed above")
        return job
