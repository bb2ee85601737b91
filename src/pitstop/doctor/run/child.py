"""The child-process bootstrap: ``python -c <boot> SPEC.json RESULT.json [PARENT_PID]``.

(:func:`pitstop.doctor.run.runner.child_command` builds that line; ``python -m
pitstop.doctor.run.child`` works too but puts the working directory on ``sys.path``.)

Order of events: die with the parent (``PARENT_PID``); read the :class:`RunSpec`; start a
watchdog thread (the timeout; it also writes a progress snapshot, RESULT.json.partial, that
the parent reads if this process stops answering); seed
python/numpy/torch (``spec.seed``); install the instrumentation; run the setup callables;
run the script as ``__main__`` with ``runpy`` (``sys.argv`` and ``sys.path[0]`` set the way
``python script.py ARGS`` sets them: the script's directory, or the working directory for
``-m``); when the planned steps are done the optimizer hook
raises :class:`StopDoctor` and the script unwinds (its ``finally`` blocks run). Then the
instrumentation is removed, the losses read, the probes run and the :class:`RunResult`
written atomically to RESULT.json. The script's output goes where the spec says; results
never travel through stdout.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import threading
import time
import traceback

from pitstop.doctor.run.runner import FINISHING_SUFFIX, PARTIAL_SUFFIX
from pitstop.doctor.run.spec import RunResult, RunSpec, SetupFailed

__all__ = ["main", "run_in_process", "SNAPSHOT_S", "Interrupted"]

#: seconds between progress snapshots (only written when a step was done since the last)
SNAPSHOT_S = 1.0

_lock = threading.Lock()
_written = False


class Interrupted(BaseException):
    """Raised in the script by a rank's SIGTERM handler (``doctor/run/rank.py``): the job is being
    stopped; the script unwinds and the rank writes what it measured."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _redirect_stdout(target: str) -> None:
    if target == "inherit":
        return
    sys.stdout.flush()
    if target == "stderr":
        fd = os.dup(2)
    else:
        fd = os.open(os.devnull if target == "devnull" else target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.close(fd)


def _script_traceback(exc: BaseException) -> str:
    """The traceback from the script's frames on (bootstrap and runpy frames dropped; runpy
    is ``<frozen runpy>`` on Python >= 3.11, ``.../runpy.py`` before)."""
    tb = exc.__traceback__
    here = os.path.dirname(os.path.abspath(__file__))
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or tb.tb_frame.f_code.co_filename in ("<frozen runpy>", "<frozen importlib._bootstrap>")
                              or tb.tb_frame.f_code.co_filename.endswith("runpy.py")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _finish(spec: RunSpec, inst, status: str, started: float, result_path: str, *, message: str = "",
            exit_code: int | None = None, tb: str | None = None, timed_out: bool = False, oom=None) -> None:
    global _written
    with _lock:
        if _written:
            return
        _touch(result_path + FINISHING_SUFFIX)  # tells the parent: writing the report, not hung
        from pitstop.doctor.record.collect import device_of
        from pitstop.doctor.record.memory import peak_rss_bytes

        result = RunResult(spec=spec, status=status, message=message, exit_code=exit_code, traceback=tb, oom=oom)
        if inst is not None:
            inst.uninstall(keep_forward_hooks=inst.full and inst.compile_watch.used)  # compiled graphs guard on them
            import torch

            device = device_of(inst)
            if not (timed_out and device == "cuda"):  # a hung GPU would hang the read too
                inst.read_losses()
            result.steps = list(inst.records)
            if inst.compile_watch.used or inst.compile_watch.compilations:
                result.compile = inst.compile_watch.record(False, 0)
            result.device = device
            result.trace_path = inst.trace_path
            if device == "cuda" and torch.cuda.is_initialized():
                result.peak_memory = int(torch.cuda.max_memory_allocated())
            else:
                result.peak_memory = peak_rss_bytes()
            if inst.full and not timed_out:
                from pitstop.doctor.record.collect import observations

                try:
                    obs = observations(inst, probes=spec.probes and oom is None, cpuinfo=spec.cpuinfo)
                    if oom is not None and spec.probes:
                        obs.notes.append("probes skipped: the script ran out of memory")
                    result.observations = obs
                except Exception as exc:  # never lose the steps because a probe failed
                    result.message += f" (observations failed: {type(exc).__name__}: {exc})"
            elif inst.full:
                from pitstop.doctor.record.collect import observations

                try:
                    result.observations = observations(inst, probes=False, cpuinfo=spec.cpuinfo)
                except Exception:
                    pass
            inst.release()
            result.trace_path = inst.trace_path  # None once the doctor's own trace was analysed and removed
        result.elapsed = time.perf_counter() - started
        result.write(result_path)
        _written = True


def _touch(path: str) -> None:
    try:
        with open(path, "ab"):
            pass
    except OSError:
        pass


def _snapshot(inst, path: str) -> None:
    """The steps done so far, for the parent in case this process stops answering."""
    import dataclasses

    from pitstop.atomic import write_atomic

    try:
        write_atomic(path, json.dumps({"steps": [dataclasses.asdict(r) for r in list(inst.records)]}), durable=False)
    except (OSError, TypeError, ValueError):
        pass


def _watchdog(spec: RunSpec, inst_box: list, started: float, result_path: str, done: threading.Event) -> None:
    deadline = time.monotonic() + spec.timeout
    seen = -1
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if done.wait(min(left, SNAPSHOT_S, threading.TIMEOUT_MAX)):
            return
        inst = inst_box[0] if inst_box else None
        if inst is not None and inst.index != seen:
            seen = inst.index
            _snapshot(inst, result_path + PARTIAL_SUFFIX)
    try:
        inst = inst_box[0] if inst_box else None
        n = inst.index if inst is not None else 0
        where = ""
        if inst is not None and inst.full:
            from pitstop.doctor.record.stacks import timeout_position

            try:
                where = f"; it was {timeout_position(inst)}"
            except Exception:  # never lose the report for a description of where it was
                where = ""
        _finish(spec, inst, "timeout", started, result_path, timed_out=True,
                message=f"timed out after {spec.timeout:g} s ({n} optimizer steps done{where}); the script was stopped")
    finally:
        sys.stderr.flush()
        os._exit(0)


def _run_setups(spec: RunSpec) -> None:
    for setup in spec.setups:
        mod_name, _, fn_name = setup.target.partition(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        fn(**setup.kwargs)


def _rss_watch(result_path: str, inst):
    """The memory trail the parent reads if the kernel kills this process (``doctor/record/oom/trail.py``)."""
    from pitstop.doctor.record.oom.capture import cpu_capacity
    from pitstop.doctor.record.oom.trail import RssWatch

    return RssWatch(result_path, inst, cpu_capacity()[0]).start()


def _capture_oom(exc: BaseException, inst, spec: RunSpec):
    """What was allocated when the script ran out of memory (None for other errors), read while
    the traceback still holds the failing frames (``doctor/record/oom/capture.py``)."""
    try:
        from pitstop.doctor.record.oom.capture import capture

        return capture(exc, inst, spec.script)
    except Exception as err:  # the diagnosis of a failure must never add one of its own
        sys.stderr.write(f"pitstop: out-of-memory analysis failed: {type(err).__name__}: {err}\n")
        return None


def run_in_process(spec: RunSpec, result_path: str) -> str:
    """Everything the child does; separate from :func:`main` for readability."""
    started = time.perf_counter()
    _redirect_stdout(spec.stdout)
    done = threading.Event()
    inst_box: list = []
    if spec.timeout is not None:
        threading.Thread(target=_watchdog, args=(spec, inst_box, started, result_path, done),
                         name="pitstop-doctor-watchdog", daemon=True).start()
    if spec.seed is not None:
        from pitstop.helpers.seed import seed_everything

        seed_everything(spec.seed)
    from pitstop.doctor.record.instrument import Instrumentation, StopDoctor

    inst = Instrumentation(spec.steps, spec.warmup, mode=spec.mode, trace_dir=spec.trace_dir,
                           trace_steps=spec.trace_steps, stop=spec.stop,
                           distributed=spec.nproc_per_node is not None)
    inst_box.append(inst)
    inst.install()
    rss = _rss_watch(result_path, inst)
    try:
        _run_setups(spec)
    except BaseException as exc:
        done.set()
        rss.stop()
        _finish(spec, inst, "setup_error", started, result_path, tb=traceback.format_exc(),
                message=f"setup failed: {type(exc).__name__}: {exc}")
        return "setup_error"
    if spec.script is not None:
        sys.argv = [spec.script, *spec.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(spec.script)))
    else:
        sys.argv = [spec.module, *spec.args]
        sys.path.insert(0, os.getcwd())
    status, kw = "finished", {}
    try:
        if spec.script is not None:
            runpy.run_path(spec.script, run_name="__main__")
        else:
            runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
        kw["message"] = "the script finished by itself"
    except StopDoctor:
        status = "stopped"
        kw["message"] = f"stopped by the doctor after {inst.index} optimizer steps"
    except Interrupted as exc:
        status = "interrupted"
        kw["message"] = f"stopped by signal {exc.signum} after {inst.index} optimizer steps"
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        status, kw["exit_code"] = "exited", code
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
        kw["message"] = f"the script called sys.exit({exc.code!r}) after {inst.index} optimizer steps"
    except SetupFailed as exc:  # a setup's change failed while the script ran: not the script's fault
        status, kw["tb"], kw["message"] = "setup_error", _script_traceback(exc), str(exc)
        sys.stderr.write(kw["tb"])
    except BaseException as exc:
        status, kw["tb"] = "error", _script_traceback(exc)
        kw["message"] = f"the script raised {type(exc).__name__}: {exc}"
        sys.stderr.write(kw["tb"])
        kw["oom"] = _capture_oom(exc, inst, spec)
    finally:
        done.set()
        rss.stop()
    sys.stdout.flush()
    _finish(spec, inst, status, started, result_path, **kw)
    return status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (2, 3, 4) or not all(a.isdigit() for a in argv[2:]):
        print("usage: python -m pitstop.doctor.run.child SPEC.json RESULT.json [PARENT_PID [GUARD_FD]]", file=sys.stderr)
        return 2
    if len(argv) >= 3:
        from pitstop.lifecycle import die_with_parent, guard_group

        die_with_parent(int(argv[2]))
        if len(argv) == 4:  # before the script can start anything: its processes die with the parent too
            guard_group(int(argv[3]))
    with open(argv[0], encoding="utf-8") as f:
        spec = RunSpec.from_dict(json.load(f))
    run_in_process(spec, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
