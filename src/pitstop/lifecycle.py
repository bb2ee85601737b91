"""Process lifecycle: nothing left running when pitstop is stopped (torch-free).

- :func:`exit_on_signals`: while active, SIGTERM and SIGHUP raise ``SystemExit(128 + signum)``
  in the main thread, so ``finally`` blocks and ``with`` statements run (child process groups
  are killed, temporary directories and lock files removed) instead of the interpreter dying
  on the spot. Signals set to be ignored (``nohup``) or handled by the application stay so.
- :func:`die_with_parent`: called first thing in a child process; the child is killed when the
  process that started it dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``; elsewhere a daemon
  thread polling the parent's pid).
- :func:`kill_group`: SIGKILL a child's whole process group (its DataLoader workers too).
- :func:`guard_pipe` / :func:`guard_group`: the whole group dies with the parent, however the
  parent ends. ``die_with_parent`` kills the child alone (SIGKILL runs no cleanup), so what the
  script started (DataLoader workers, a ``subprocess``) would be reparented to init and live on.
  The parent keeps the write end of a pipe (:func:`guard_pipe`) and passes the read end to the
  child, which forks a small *sentinel* into its own process group (:func:`guard_group`); the
  sentinel blocks on the pipe, and when the parent ends -- returns, is signalled, or SIGKILLed:
  the kernel closes the write end -- it SIGKILLs the group (and, as :func:`kill_group` does,
  the descendants of its members that left it with ``setsid``). No handler has to run in time and
  no pid has to be recorded: a signal that arrives while the child is still starting, or under
  load, still ends the whole group.
- :func:`pid_alive`: whether a pid names a live process on this host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["exit_on_signals", "die_with_parent", "kill_group", "pid_alive", "TERMINATING_SIGNALS", "guard_pipe",
           "guard_group"]

#: the signals that normally end a process and that pitstop turns into a clean exit
TERMINATING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_PR_SET_PDEATHSIG = 1


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise ``SystemExit(128 + signum)`` (main thread only;
    a no-op elsewhere). Only signals at their default action are changed; the previous
    handlers are restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in TERMINATING_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _raise_exit)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a live process on this host (or one we may not signal)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (a child started with ``start_new_session``),
    and the descendants of its members that left the group (a worker that called ``setsid``)."""
    _kill_tree(pid)


def _kill_tree(pgid: int) -> None:
    """SIGKILL the descendants of group ``pgid``'s members that are not in it, then the group
    (in that order: the group's own sentinel is a member, and killed they would be reparented)."""
    members = _members(pgid)
    for p in _descendants(members or [pgid]):
        if p not in members and p != pgid and p != os.getpid():
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` (Linux ``/proc``; empty elsewhere)."""
    out = []
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return out
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            if int(data[data.rindex(b")") + 2:].split()[2]) == pgid:  # state ppid pgrp ...
                out.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return out


def _descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process below them (``/proc/<pid>/task/<tid>/children``)."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                    todo.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                pass
    return sorted(seen)


def _watch_parent(parent: int, interval: float) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(128 + signal.SIGKILL)  # the parent is gone: nobody will read our result
        threading.Event().wait(interval)


def die_with_parent(parent: int, *, interval: float = 0.5) -> None:
    """Make this process die when ``parent`` (the pid that started it) dies.

    On Linux the kernel delivers SIGKILL on the parent's death (``PR_SET_PDEATHSIG``, set
    through libc's ``prctl``); if the parent already died before that call, exit now. Where
    ``prctl`` is unavailable a daemon thread polls ``os.getppid()`` every ``interval`` s."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent:
                    os._exit(128 + signal.SIGKILL)
                return
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)
    threading.Thread(target=_watch_parent, args=(parent, interval), name="pitstop-parent-watch", daemon=True).start()


def guard_pipe() -> tuple[int, int]:
    """``(read_fd, write_fd)`` for :func:`guard_group`: pass the read end to the child (and
    close it here once the child started); keep the write end open as long as the child's
    group may live, and close it when done (a parent that dies closes it by dying)."""
    return os.pipe()


def guard_group(fd: int) -> None:
    """In a child that leads its own process group: fork a sentinel (detached by a double
    fork, so it is not this process's child) that blocks reading ``fd``, the read end of a
    :func:`guard_pipe` whose write end only the parent holds, and SIGKILLs this process
    group at end of file: when the parent ended, however it ended. Closes ``fd`` here. A
    no-op (``fd`` closed) where ``fork`` does not exist."""
    if not hasattr(os, "fork"):
        os.close(fd)
        return
    first = os.fork()
    if first == 0:  # the intermediate: forks the sentinel and leaves at once
        try:
            if os.fork() == 0:
                _sentinel(fd)
        finally:
            os._exit(0)
    os.close(fd)
    os.waitpid(first, 0)


def _sentinel(fd: int) -> None:
    try:
        null = os.open(os.devnull, os.O_RDWR)  # hold none of the child's pipes (a reader waits for their end)
        for std in (0, 1, 2):
            os.dup2(null, std)
        for sig in (signal.SIGINT, *TERMINATING_SIGNALS):  # only the parent's end ends it
            signal.signal(sig, signal.SIG_IGN)
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    finally:
        try:
            _kill_tree(os.getpgrp())  # the group, and what left it (setsid) below its members
        finally:
            os._exit(0)
