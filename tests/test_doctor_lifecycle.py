"""Nothing left running: signals to ``pitstop doctor``, a killed parent, a GIL-holding hang,
and the child's ``sys.path`` (issue 14)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, default_signals

pytestmark = pytest.mark.slow

# A tiny training script: writes its pid (and a grandchild's, like a DataLoader worker) to
# PIDS, takes 3 optimizer steps, then hangs (sleeping, or holding the GIL).
SCRIPT = """
import ctypes, os, subprocess, sys, time
import torch
out, mode = sys.argv[1], sys.argv[2]
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", out],  # out: a marker
                          start_new_session=mode == "setsid")  # a worker that leaves the process group
with open(out + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {worker.pid}")
os.replace(out + ".tmp", out)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    if step == 3:
        if mode == "gil":
            time.sleep(3)  # the child's watchdog snapshots its progress (every second)
            # one C call that blocks holding the GIL (PyDLL never releases it), like a native
            # library stuck in a call: the watchdog thread never runs again. It waits rather than
            # spins (sum(range(10 ** 14)) did the same but burned a core until the kill).
            ctypes.PyDLL(None).sleep(600)
        time.sleep(600)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return True


def _wait_dead(pids, within: float = 30.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _wait_file(path: Path, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.2)


def _doctor_dirs(parent: int) -> list[Path]:
    """The temporary directories of the runs of pitstop process ``parent``."""
    return list(Path(tempfile.gettempdir()).glob(f"pitstop-doctor-{parent}-*"))


# starts its argv with SIGHUP ignored, as ``nohup`` does
_NOHUP = ("import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
          "os.execv(sys.argv[1], sys.argv[1:])")


def _start(tmp_path: Path, mode: str = "sleep", *extra: str, command: str = "doctor",
           sighup: str = "default") -> tuple[subprocess.Popen, Path]:
    """Start ``pitstop COMMAND`` on SCRIPT with the signals it is sent at their default action
    (the suite itself may run under ``nohup``), or with SIGHUP ignored (``sighup="ignored"``)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    own = ("--no-probes", "--format", "json") if command == "doctor" else ("--progress", "off")
    argv = [sys.executable, "-m", "pitstop", command, str(script), "--steps", "2", "--warmup", "1", *own, *extra,
            "--", str(pids), mode]
    # SIGTERM and SIGINT at their default action in both cases
    argv = default_signals(argv) if sighup == "default" else [*default_signals([sys.executable, "-c", _NOHUP]), *argv]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, pids


def _ignored(pid: int, sig: int) -> bool:
    """Whether process ``pid`` ignores ``sig`` (the SigIgn mask of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigIgn in /proc/{pid}/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("command, sig, mode", [("doctor", signal.SIGTERM, "sleep"), ("doctor", signal.SIGHUP, "sleep"),
                                                ("tune", signal.SIGTERM, "sleep"), ("doctor", signal.SIGTERM, "setsid"),
                                                ("tune", signal.SIGTERM, "setsid")])
def test_signal_to_doctor_or_tune_kills_the_child_group_and_removes_its_temp_dir(tmp_path, command, sig, mode):
    proc, pids = _start(tmp_path, mode, "--timeout", "300", command=command)
    try:
        _wait_file(pids)
        time.sleep(1.0)
        child_pids = [int(p) for p in pids.read_text().split()]
        assert all(_alive(p) for p in child_pids)
        assert len(_doctor_dirs(proc.pid)) == 1
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    assert _wait_dead(child_pids) == [], "the script or its worker outlived pitstop doctor"
    assert _doctor_dirs(proc.pid) == [], "the run's temporary directory was left behind"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_inherited_ignored_sighup_stays_ignored_and_sigterm_still_ends_the_run(tmp_path):
    """Under ``nohup`` SIGHUP arrives ignored: pitstop keeps it so (the doctor and the script
    it runs go on), and a later SIGTERM still ends the whole run cleanly."""
    proc, pids = _start(tmp_path, "sleep", "--timeout", "300", sighup="ignored")
    try:
        _wait_file(pids)
        child_pids = [int(p) for p in pids.read_text().split()]
        assert _ignored(proc.pid, signal.SIGHUP) and _ignored(child_pids[0], signal.SIGHUP)
        proc.send_signal(signal.SIGHUP)  # discarded on sending: it may not end anything
        assert proc.poll() is None and all(_alive(p) for p in child_pids)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err  # not 128 + SIGHUP: the SIGHUP did nothing
    assert _wait_dead(child_pids) == [], "the script or its worker outlived pitstop doctor"
    assert _doctor_dirs(proc.pid) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_default_signals_helper_undoes_an_inherited_ignored_sighup(tmp_path):
    """What the tests above rely on: ``default_signals`` starts its command with SIGHUP at the
    default action even when the parent ignores it."""
    probe = "import os, signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)"
    ignored = subprocess.run([sys.executable, "-c", _NOHUP, sys.executable, "-c", probe],
                             capture_output=True, text=True, timeout=60)
    reset = subprocess.run([sys.executable, "-c", _NOHUP, *default_signals([sys.executable, "-c", probe])],
                           capture_output=True, text=True, timeout=60)
    assert (ignored.stdout.strip(), reset.stdout.strip()) == ("True", "False"), ignored.stderr + reset.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["sleep", "setsid"])
def test_sigkill_of_the_parent_takes_the_child_and_what_it_started_down(tmp_path, mode):
    proc, pids = _start(tmp_path, mode, "--timeout", "300")
    try:
        _wait_file(pids)
        script_pid, worker_pid = (int(p) for p in pids.read_text().split())
        proc.kill()  # SIGKILL: no handler runs in the parent
        proc.wait(timeout=30)
        assert _wait_dead([script_pid]) == [], "the child survived its parent's SIGKILL"
        assert _wait_dead([worker_pid]) == [], "the script's own subprocess outlived pitstop doctor's SIGKILL"
    finally:
        proc.kill()
        for p in pids.read_text().split() if pids.exists() else []:
            try:
                os.kill(int(p), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ours(parent: int, marker: str) -> list[int]:
    """Live processes of pitstop process ``parent``'s runs: its doctor children (their command
    line names the run's temporary directory), its warm tune worker, and the script's
    subprocess (its command line carries ``marker``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == parent:
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (f"pitstop-doctor-{parent}-" in cmd or f"pitstop.tune.warm {parent}" in cmd or marker in cmd) \
                and _alive(int(entry.name)):
            out.append(int(entry.name))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("command, sig, when", [("doctor", signal.SIGHUP, "starting"), ("doctor", signal.SIGTERM, "spawned"),
                                                ("doctor", signal.SIGHUP, "spawned"), ("tune", signal.SIGTERM, "spawned")])
def test_a_signal_while_the_child_is_starting_still_ends_the_whole_group(tmp_path, command, sig, when):
    """No sleep before the signal: ``starting`` sends it as soon as the run's temporary
    directory exists (the child is being spawned or importing), ``spawned`` as soon as the
    script started its subprocess. Wherever it lands, nothing of the run may stay alive."""
    proc, pids = _start(tmp_path, "sleep", "--timeout", "300", command=command)
    try:
        deadline = time.monotonic() + 120
        while not (_doctor_dirs(proc.pid) if when == "starting" else pids.exists()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    deadline = time.monotonic() + 30
    while (left := _ours(proc.pid, str(pids))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], "a process of the run outlived pitstop"
    assert _doctor_dirs(proc.pid) == []


def test_gil_holding_hang_is_killed_after_a_short_grace_with_a_partial_report(tmp_path):
    from pitstop.doctor.run.runner import GRACE_S

    assert GRACE_S <= 10
    proc, pids = _start(tmp_path, "gil", "--timeout", "20")
    out, err = proc.communicate(timeout=20 + GRACE_S + 90)  # was 20 + 60 s grace before
    assert proc.returncode == 4, err
    d = json.loads(out)
    assert d["outcome"] == "timeout"
    assert len(d["steps"]["records"]) == 3  # 1 warmup + 2 observed before the hang, from the snapshot
    script_pid, worker_pid = (int(p) for p in pids.read_text().split())
    assert _wait_dead([script_pid, worker_pid]) == []


def test_child_does_not_import_the_working_directorys_modules(tmp_path):
    """``python script.py`` puts the script's directory first, not the working directory."""
    cwd, code = tmp_path / "cwd", tmp_path / "code"
    cwd.mkdir()
    code.mkdir()
    marker = tmp_path / "hijacked"
    for name in ("json", "runpy", "dataclasses"):
        (cwd / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n", encoding="utf-8")
    (code / "helper_mod.py").write_text("VALUE = 3\n", encoding="utf-8")
    (code / "train.py").write_text(
        "import sys, torch, helper_mod\n"
        f"assert sys.path[0] == {str(code)!r}, sys.path[:3]\n"
        "m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(5):\n"
        "    l = m(torch.randn(4, 2)).sum() * helper_mod.VALUE; o.zero_grad(); l.backward(); o.step()\n",
        encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # the parent started as the ``pitstop`` console script starts (its own directory, not cwd, first)
    boot = "import sys; del sys.path[0]; from pitstop.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", boot, "doctor", str(code / "train.py"), "--steps", "2", "--warmup",
                          "1", "--no-probes", "--format", "json"], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=240)
    assert not marker.exists(), f"a module of the working directory ran in the child: {marker.read_text()}"
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "stopped"


def test_timeouts_that_cannot_be_honoured_are_refused():
    from pitstop.doctor.run.spec import RunSpec

    for bad in (float("nan"), float("inf"), 1e10, 0, -1):
        with pytest.raises(ValueError, match="timeout"):
            RunSpec(script="x.py", timeout=bad)
