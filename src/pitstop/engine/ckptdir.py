"""``fit``'s checkpoint directory: checked before training, locked, and pruned per run (torch-free).

- **Checked first** (:func:`check_checkpoint_dir`): a path that is a file, lies under a file,
  cannot be created or is not writable fails with :class:`CheckpointDirError` before the
  first step, not after an hour of training.
- **Locked** (:class:`DirLock`): ``pitstop.lock`` in the directory, created with
  ``O_CREAT|O_EXCL`` and holding the owner's pid and host. A second ``fit`` on the same
  directory fails with :class:`CheckpointDirLocked` naming the holder. A lock whose process
  no longer runs on this host is stale and taken over; one held from another host is never
  guessed about (the message says which file to remove).
- **Per-run pruning** (:class:`Manifest`): ``pitstop-checkpoints.json`` lists, per run id,
  the checkpoint files that run wrote, in write order; the last run listed is the current one.
  ``keep_checkpoints`` deletes only the current run's oldest files, never the one just written
  and never a file of another run or one the manifest does not list. A resumed run continues
  the run it resumed from; ``resume=False`` (or nothing to resume) starts a new run id, and a
  later resume loads that run's newest checkpoint, not another run's higher step.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from pitstop.atomic import remove_stale_temps, writable_dir_problem, write_atomic
from pitstop.lifecycle import pid_alive

__all__ = ["CheckpointDirError", "CheckpointDirLocked", "check_checkpoint_dir", "DirLock", "Manifest",
           "LOCK_NAME", "MANIFEST_NAME", "new_run_id", "check_keep", "open_checkpoint_dir", "sharded_name",
           "remove_sharded"]

LOCK_NAME = "pitstop.lock"
MANIFEST_NAME = "pitstop-checkpoints.json"
_HOST = socket.gethostname()
#: a lock file still empty after this many seconds was left by a process that died while creating it
_EMPTY_LOCK_S = 10.0


class CheckpointDirError(ValueError):
    """``checkpoint_dir`` cannot hold checkpoints (a file, under a file, not writable)."""


class CheckpointDirLocked(CheckpointDirError):
    """Another live process holds ``checkpoint_dir``'s lock."""


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def check_keep(keep: object, name: str = "fit: keep_checkpoints") -> None:
    """``keep_checkpoints``: an int >= 1, or None to keep every checkpoint."""
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise ValueError(f"{name} must be an int >= 1, or None to keep every checkpoint, got {keep!r} "
                         "(0 or a negative number would delete every checkpoint)")


def check_checkpoint_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and make sure checkpoints can be written there; returns it."""
    path = Path(path)
    problem = writable_dir_problem(path)
    if problem is not None:
        raise CheckpointDirError(f"fit: checkpoint_dir: {problem}")
    return path


class DirLock:
    """The lock file of a checkpoint directory (use as a context manager, or acquire/release)."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / LOCK_NAME
        self.held = False

    def _holder(self) -> dict | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError:
            return {}
        try:
            data = json.loads(text)
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}

    def _stale(self, holder: dict) -> bool:
        if not holder:  # empty or garbled: a process that died while creating it, or not ours
            try:
                return time.time() - self.path.stat().st_mtime > _EMPTY_LOCK_S
            except OSError:
                return True
        pid = holder.get("pid")
        return holder.get("host") == _HOST and isinstance(pid, int) and not pid_alive(pid)

    def acquire(self) -> DirLock:
        record = json.dumps({"pid": os.getpid(), "host": _HOST, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:
                    continue  # released meanwhile: try again
                if not self._stale(holder):
                    who = (f"process {holder.get('pid')} on host {holder.get('host')!r} since {holder.get('since')}"
                           if holder else "an unknown process")
                    raise CheckpointDirLocked(
                        f"fit: checkpoint_dir {str(self.path.parent)!r} is in use by {who} (lock file {self.path}); "
                        "two runs writing one directory would overwrite each other's checkpoints. Use another "
                        "checkpoint_dir, or remove the lock file if that process no longer runs") from None
                self._take_over(holder)
                continue
            except OSError as exc:
                raise CheckpointDirError(f"fit: checkpoint_dir: cannot create the lock file {self.path}: "
                                         f"{exc.strerror or exc}") from None
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(record)
            self.held = True
            return self
        raise CheckpointDirLocked(f"fit: could not take the lock {self.path} (other processes keep taking it)")

    def _take_over(self, holder: dict) -> None:
        """Move the stale lock aside (atomic rename: one taker wins), check that it was the stale
        one and not a lock a live process took meanwhile (then put that one back)."""
        aside = self.path.with_name(f"{LOCK_NAME}.stale-{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return
        try:
            moved = json.loads(aside.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            moved = {}
        if moved and moved != holder and not self._stale(moved):
            try:
                os.link(aside, self.path)  # put the live lock back (fails if another was made)
            except OSError:
                pass
        aside.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held:
            self.held = False
            holder = self._holder()
            if holder and holder.get("pid") == os.getpid() and holder.get("host") == _HOST:
                self.path.unlink(missing_ok=True)

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def sharded_name(pt_name: str) -> str:
    """The directory of an FSDP2 checkpoint's sharded part (:mod:`pitstop.engine.shard_ckpt`):
    ``step-000000004.pt`` -> ``step-000000004.dcp``."""
    return pt_name[: -len(".pt")] + ".dcp" if pt_name.endswith(".pt") else pt_name + ".dcp"


def remove_sharded(pt_path: Path) -> None:
    """Delete the sharded part that belongs to the checkpoint file ``pt_path`` (if any)."""
    shutil.rmtree(pt_path.parent / sharded_name(pt_path.name), ignore_errors=True)


class Manifest:
    """Which run wrote which checkpoint file (``pitstop-checkpoints.json``, written atomically)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.path = self.directory / MANIFEST_NAME
        self.runs: dict[str, list[str]] = {}  # run id -> file names in write order; last = current run
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            runs = data.get("runs", []) if isinstance(data, dict) else []
            for entry in runs:
                if isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("files"), list):
                    self.runs[entry["id"]] = [f for f in entry["files"] if isinstance(f, str) and "/" not in f]
        except (OSError, ValueError):
            pass  # no manifest (or an unreadable one): no file is known to belong to any run

    @property
    def current(self) -> str | None:
        return next(reversed(self.runs), None)

    def run_of(self, name: str) -> str | None:
        return next((run for run, files in self.runs.items() if name in files), None)

    def files(self, run: str) -> list[Path]:
        """The existing files of ``run``, newest written first."""
        return [self.directory / f for f in reversed(self.runs.get(run, [])) if (self.directory / f).is_file()]

    def record(self, run: str, path: Path, keep: int | None) -> list[Path]:
        """Note that ``run`` wrote ``path`` (it becomes the current run); with ``keep``, delete
        that run's files beyond the ``keep`` most recently written. Returns the deleted files."""
        for other, files in self.runs.items():  # a name rewritten by this run is no longer another's
            if other != run and path.name in files:
                files.remove(path.name)
        files = [f for f in self.runs.pop(run, []) if f != path.name] + [path.name]
        self.runs[run] = files
        deleted = []
        if keep is not None and len(files) > keep:
            for name in files[:-keep]:
                (self.directory / name).unlink(missing_ok=True)
                remove_sharded(self.directory / name)  # an FSDP2 checkpoint's sharded part
                deleted.append(self.directory / name)
            self.runs[run] = files[-keep:]
        self.save()
        return deleted

    def save(self) -> None:
        runs = [{"id": run, "files": files} for run, files in self.runs.items() if files or run == self.current]
        write_atomic(self.path, json.dumps({"format": 1, "runs": runs}, indent=1) + "\n")


@contextlib.contextmanager
def open_checkpoint_dir(path: str | Path | None, *, writer: bool = True) -> Iterator[Path | None]:
    """``fit``'s set-up of ``checkpoint_dir``: checked, stale temporary files of dead writers
    removed, and locked for the block (``writer``: the process that writes, rank 0)."""
    if path is None:
        yield None
        return
    if not writer:
        yield Path(path)
        return
    path = check_checkpoint_dir(path)
    with DirLock(path):
        remove_stale_temps(path)
        yield path
