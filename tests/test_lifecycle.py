"""``lifecycle.kill_group`` kills its own child's group and what left it, and nothing that is not
its own: a pid that names an unrelated process (as after pid reuse) is left alone; a signal that
lands while ``temporary_directory`` makes its directory leaves nothing behind (issue 32)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pitstop import lifecycle
from pitstop.lifecycle import exit_on_signals, kill_group, temporary_directory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Writes "<its pid> <member pid> <setsid pid>" to argv[1]: a worker in its group (as a DataLoader
# worker) and one that left it with setsid; then sleeps.
LEADER = """
import os, subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
member = subprocess.Popen(sleep)
left = subprocess.Popen(sleep, start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {member.pid} {left.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""

# Starts LEADER detached from us (double fork: its parent exits, it is reparented away from
# this process), as a process that took over a reused pid would be: not our descendant.
# argv: LEADER, its output path, "session" (it leads a group of its own) or "plain" (it stays in
# the group of the test process: no group is led by its pid).
DETACHED = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=sys.argv[3] == "session",
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def _pids(path: Path, within: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _cleanup(pids: list[int], marker: Path) -> None:
    """Kill the detached test processes (checked by the marker in their command line)."""
    for p in pids:
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if str(marker).encode() in cmd or b"time.sleep(120)" in cmd:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_kills_its_childs_group_and_the_worker_that_left_it(tmp_path):
    out = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", LEADER, str(out)], start_new_session=True)
    try:
        pids = _pids(out)
        assert all(_alive(p) for p in pids)
        kill_group(proc.pid)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert _gone(pids), [p for p in pids if _alive(p)]
    finally:
        proc.kill()
        proc.wait()
        _cleanup(_pids(out) if out.exists() else [], out)


def test_kills_a_grandchilds_group_but_not_the_child_that_started_it(tmp_path):
    """As ``pitstop doctor`` kills a torchrun rank (the agent's child) by its pid."""
    out = tmp_path / "pids"
    starter = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {LEADER!r}, sys.argv[1]], "
               "start_new_session=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", starter, str(out)], start_new_session=True)
    try:
        pids = _pids(out)
        kill_group(pids[0])
        assert _gone(pids), [p for p in pids if _alive(p)]
        assert proc.poll() is None, "the grandchild's parent is not in its group and was killed"
    finally:
        proc.kill()
        proc.wait()
        _cleanup(_pids(out) if out.exists() else [], out)


@pytest.mark.parametrize("how", ["session", "plain"])
def test_leaves_alone_a_pid_that_is_not_its_own(tmp_path, how):
    """The pid of a process that does not descend from this process (what a reused pid looks
    like), leading a process group (``session``) or not (``plain``), with children: nothing of it
    is signalled. (Before: ``killpg`` took the leader's group down, and for a pid leading no group
    a fallback killed every process below it.)"""
    out = tmp_path / "pids"
    subprocess.run([sys.executable, "-c", DETACHED, LEADER, str(out), how], check=True, timeout=60)
    pids = _pids(out)
    try:
        ppid = int(Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert ppid != os.getpid()  # reparented away: not ours
        kill_group(pids[0])
        time.sleep(0.5)  # a SIGKILL lands at once; give a wrong one the time to show
        assert all(_alive(p) for p in pids), [p for p in pids if not _alive(p)]
    finally:
        _cleanup(pids, out)
        assert _gone(pids)


def test_leaves_alone_the_group_of_a_child_already_reaped(tmp_path):
    """Once the child is reaped its pid may be reused: ``kill_group`` does not act on it (the
    orphaned members are its guard sentinel's to end)."""
    out = tmp_path / "pids"
    leader = LEADER.replace("time.sleep(120)\n", "os._exit(0)\n")  # the leader ends at once, its workers live on
    proc = subprocess.Popen([sys.executable, "-c", leader, str(out)], start_new_session=True)
    proc.wait(timeout=60)  # reaped: its pid is free
    pids = _pids(out)
    try:
        kill_group(proc.pid)
        time.sleep(0.5)
        assert _alive(pids[1]) and _alive(pids[2])
    finally:
        _cleanup(pids, out)
        assert _gone(pids[1:])


def test_a_signal_landing_while_the_temporary_directory_is_made_leaves_nothing_behind(tmp_path, monkeypatch):
    """SIGTERM sent the instant the directory exists (as ``pitstop doctor`` may get it while
    starting): ``SystemExit`` comes once the directory is owned, and it is removed."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    real = tempfile.TemporaryDirectory

    def landing(prefix):
        made = real(prefix=prefix, dir=tmp_path)
        os.kill(os.getpid(), signal.SIGTERM)  # unheld, the handler would raise right here
        return made

    monkeypatch.setattr(lifecycle.tempfile, "TemporaryDirectory", landing)
    with pytest.raises(SystemExit) as stopped, exit_on_signals(), temporary_directory("pitstop-test-"):
        sum(range(1000))
    assert stopped.value.code == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == [], "the directory was left behind"
