"""The one atomic file writer of pitstop (checkpoints, fixed sources, recipes, reports). Torch-free.

:func:`write_atomic` writes to a temporary file created in the target's own directory with
``tempfile.mkstemp`` (``O_CREAT|O_EXCL``, so a planted file or symbolic link under a
predictable name is never opened or followed), flushes and ``fsync``-s it, gives it the
target's permission bits (or the umask's default for a new file), renames it over the target
with ``os.replace`` (atomic within a file system) and ``fsync``-s the directory. A reader sees
the old file or the new one, never half of one. A crash leaves at most a temporary file named
``.<name>.pitstop-tmp.<host>.<pid>.<random>``; :func:`remove_stale_temps` deletes those of
processes of this host that no longer run (every write does so for its directory).
"""

from __future__ import annotations

import os
import re
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pitstop.lifecycle import pid_alive

__all__ = ["write_atomic", "remove_stale_temps", "is_temp_name", "fsync_dir", "writable_dir_problem"]

_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64]
_TEMP = re.compile(r"^\..+\.pitstop-tmp\.(?P<host>[A-Za-z0-9-]*)\.(?P<pid>\d+)\.[^.]+$")


def is_temp_name(name: str) -> bool:
    """True for the name of a temporary file of :func:`write_atomic`."""
    return _TEMP.match(name) is not None


def fsync_dir(directory: str | Path) -> None:
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a directory
        pass
    finally:
        os.close(fd)


def writable_dir_problem(path: str | Path) -> str | None:
    """Create ``path`` (and its parents) if needed; ``None`` when it is then a writable
    directory, else why not (one phrase naming the path: for an error message)."""
    path = Path(path)
    existing = next((a for a in (path, *path.parents) if a.exists() or a.is_symlink()), None)
    if existing is not None and not existing.is_dir():
        return f"{str(existing)!r} is not a directory" + ("" if existing == path else f" (in {str(path)!r})")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create directory {str(path)!r}: {exc.strerror or exc}"
    if not path.is_dir():
        return f"{str(path)!r} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"directory {str(path)!r} is not writable"
    return None


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Delete the temporary files that writers on this host which no longer run left in
    ``directory`` (only regular files named by :func:`write_atomic`). Returns what was removed."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or m["host"] != _HOST or pid_alive(int(m["pid"])):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _default_mode() -> int:
    try:  # Linux >= 4.7 shows the umask without changing it (no race with other threads)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | Path, data: str | bytes | Callable[[BinaryIO], None], *, encoding: str = "utf-8",
                 follow_symlinks: bool = False, keep_owner: bool = False, durable: bool = True) -> Path:
    """Replace the file ``path`` with ``data`` atomically; returns the path written.

    ``data``: text (encoded with ``encoding``), bytes, or a function that writes to the open
    binary file (``torch.save(state, f)``). ``follow_symlinks``: when ``path`` is a symbolic
    link, rewrite the file it points to and keep the link (``lint --fix``); by default the
    link itself is replaced by the new file, whatever it pointed to. ``keep_owner``: give the
    new file the old one's owner and group where the process may. ``durable=False`` skips the
    ``fsync`` calls (still atomic, not crash-proof: progress files in a private temporary
    directory). The directory must exist.
    Any error (``OSError``) leaves the old file as it was and no temporary file behind."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if follow_symlinks else path
    directory = target.parent
    remove_stale_temps(directory)
    try:
        old = os.stat(target, follow_symlinks=False)
        old = old if stat.S_ISREG(old.st_mode) else None
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.pitstop-tmp.{_HOST}.{os.getpid()}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            if durable:
                os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        if (keep_owner and old is not None and hasattr(os, "geteuid")
                and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid())):
            try:  # before chmod: chown may clear the set-id bits
                os.chown(tmp, old.st_uid, old.st_gid)
            except PermissionError:  # only root may give a file away: the new file stays ours
                pass
        os.chmod(tmp, (old.st_mode & 0o7777) if old is not None else _default_mode())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory)  # and the rename itself is durable
    return target
