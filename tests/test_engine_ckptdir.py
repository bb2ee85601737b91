"""fit's checkpoint directory (issue 14): per-run pruning, locking, checks before the first
step, temporary files (mkstemp, stale ones removed, planted links not followed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from engine_helpers import ce, data, loader, twins
from pitstop.atomic import is_temp_name, write_atomic
from pitstop.engine import Callback, Recipe, fit, save_checkpoint
from pitstop.engine.checkpoint import checkpoint_path, list_checkpoints, load_checkpoint
from pitstop.engine.ckptdir import LOCK_NAME, CheckpointDirError, CheckpointDirLocked, DirLock


class Steps(Callback):
    def __init__(self):
        self.steps = 0

    def on_step_end(self, state, loss):
        self.steps += 1


def _fit(ckpt, *, steps=4, resume=True, every=1, keep=3, callbacks=()):
    model, opt, _, _ = twins()
    return fit(model, opt, ce, loader(data(32), 8), recipe=Recipe(seed=0), max_steps=steps, checkpoint_dir=ckpt,
               checkpoint_every=every, keep_checkpoints=keep, resume=resume, progress=False, callbacks=callbacks)


def _names(ckpt):
    return sorted(p.name for p in list_checkpoints(ckpt))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_pruning_never_touches_another_runs_checkpoints_nor_the_one_just_written(tmp_path):
    _fit(tmp_path, steps=12, every=4, keep=None)  # another run: steps 4, 8, 12
    other = {n: (tmp_path / n).read_bytes() for n in _names(tmp_path)}
    (tmp_path / "step-000000099.pt").write_bytes((tmp_path / "step-000000012.pt").read_bytes())  # unlisted file
    r = _fit(tmp_path, steps=3, resume=False, every=1, keep=1)  # a new run with lower step numbers
    assert r.resumed_from is None and r.checkpoint == checkpoint_path(tmp_path, 3)
    assert _names(tmp_path) == ["step-000000003.pt", "step-000000004.pt", "step-000000008.pt", "step-000000012.pt",
                                "step-000000099.pt"]
    assert all((tmp_path / n).read_bytes() == b for n, b in other.items())
    assert load_checkpoint(r.checkpoint)["step"] == 3
    # a later resume continues the current run (step 3), not the other run's step 12 or 99
    r2 = _fit(tmp_path, steps=5, keep=1)
    assert r2.resumed_from == checkpoint_path(tmp_path, 3) and r2.steps == 5
    assert "step-000000003.pt" not in _names(tmp_path) and "step-000000005.pt" in _names(tmp_path)
    assert "step-000000012.pt" in _names(tmp_path)


def test_restart_after_every_checkpoint_was_corrupt_keeps_its_new_checkpoints(tmp_path):
    _fit(tmp_path, steps=4, every=2, keep=None)
    for p in list_checkpoints(tmp_path):
        p.write_bytes(p.read_bytes()[:50])
    with pytest.warns(UserWarning, match="truncated or corrupt"):
        r = _fit(tmp_path, steps=1, every=1, keep=1)  # nothing to resume: starts over at step 0
    assert r.resumed_from is None and r.checkpoint.is_file()
    assert load_checkpoint(r.checkpoint)["step"] == 1


@pytest.mark.parametrize("keep", [0, -1, True, 1.5])
def test_keep_checkpoints_must_be_at_least_one(tmp_path, keep):
    with pytest.raises(ValueError, match="keep_checkpoints must be an int >= 1, or None"):
        _fit(tmp_path / "ck", keep=keep)
    assert not (tmp_path / "ck").exists()
    with pytest.raises(ValueError, match="keep must be an int >= 1"):
        save_checkpoint({"step": 1}, tmp_path / "x.pt", keep=keep)


def test_a_second_fit_on_a_locked_directory_fails_naming_the_holder_and_a_stale_lock_is_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                      "since": "earlier"}), encoding="utf-8")
        steps = Steps()
        with pytest.raises(CheckpointDirLocked, match=rf"in use by process {holder.pid} on host"):
            _fit(tmp_path, callbacks=[steps])
        assert steps.steps == 0 and list_checkpoints(tmp_path) == []
    finally:
        holder.kill()
        holder.wait()
    r = _fit(tmp_path, steps=2)  # the holder is gone: its lock is stale
    assert r.steps == 2 and not (tmp_path / LOCK_NAME).exists()


def test_the_lock_is_held_during_fit_and_released_after_an_error(tmp_path):
    seen = []

    class Peek(Callback):
        def on_step_end(self, state, loss):
            seen.append(json.loads((tmp_path / LOCK_NAME).read_text()))
            with pytest.raises(CheckpointDirLocked):  # a second writer, in-process here
                DirLock(tmp_path).acquire()
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        _fit(tmp_path, callbacks=[Peek()])
    assert seen[0]["pid"] == os.getpid() and seen[0]["host"] == socket.gethostname()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_from_another_host_is_never_guessed_stale(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": _dead_pid(), "host": "elsewhere-node-7"}), encoding="utf-8")
    with pytest.raises(CheckpointDirLocked, match="elsewhere-node-7.*remove the lock file"):
        _fit(tmp_path)


@pytest.mark.parametrize("case", ["file", "under-file"])
def test_a_checkpoint_dir_that_cannot_hold_checkpoints_fails_before_the_first_step(tmp_path, case):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    target = blocker if case == "file" else blocker / "ckpt"
    steps = Steps()
    with pytest.raises(CheckpointDirError, match="is not a directory"):
        _fit(target, callbacks=[steps])
    assert steps.steps == 0


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_checkpoint_dir_fails_before_the_first_step(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    steps = Steps()
    try:
        with pytest.raises(CheckpointDirError, match="not writable"):
            _fit(ro, callbacks=[steps])
    finally:
        ro.chmod(0o755)
    assert steps.steps == 0


def test_stale_temp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    host = socket.gethostname()
    dead = tmp_path / f".step-000000001.pt.pitstop-tmp.{host.replace('.', '-')}.{_dead_pid()}.abc123"
    live = tmp_path / f".step-000000001.pt.pitstop-tmp.{host.replace('.', '-')}.{os.getpid()}.def456"
    dead.write_bytes(b"x" * 1000)
    live.write_bytes(b"y")
    assert is_temp_name(dead.name) and is_temp_name(live.name)
    _fit(tmp_path, steps=1)
    assert not dead.exists() and live.exists()
    assert [p.name for p in tmp_path.iterdir() if is_temp_name(p.name)] == [live.name]


def test_planted_links_at_temp_names_are_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    for step in range(1, 3):  # the names the old writer used: .NAME.tmp-PID
        os.symlink(victim, ckpt / f".step-{step:09d}.pt.tmp-{os.getpid()}")
    _fit(ckpt, steps=2)
    assert victim.read_text() == "precious"
    link = tmp_path / "out.json"
    os.symlink(victim, link)  # writing a report over a link replaces the link, not its target
    write_atomic(link, "{}")
    assert victim.read_text() == "precious" and not link.is_symlink() and link.read_text() == "{}"


def test_write_atomic_keeps_the_old_file_and_leaves_no_temp_file_when_writing_fails(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    target.chmod(0o640)

    def half(f):
        f.write(b"new but half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["report.json"]
    write_atomic(target, b"new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o640
