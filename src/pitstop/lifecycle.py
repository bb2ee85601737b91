"""Process lifecycle: nothing left running when pitstop is stopped (torch-free).

- :func:`exit_on_signals`: while active, SIGTERM and SIGHUP raise ``SystemExit(128 + signum)``
  in the main thread, so ``finally`` blocks and ``with`` statements run (child process groups
  are killed, temporary directories and lock files removed) instead of the interpreter dying
  on the spot. Signals set to be ignored (``nohup``) or handled by the application stay so.
- :func:`die_with_parent`: called first thing in a child process; the child is killed when the
  process that started it dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``; elsewhere a daemon
  thread polling the parent's pid).
- :func:`kill_group`: SIGKILL a child's whole process group (its DataLoader workers too), never
  a process it has not verified to be its own (a reused pid is left alone).
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
- :func:`temporary_directory`: a ``TemporaryDirectory`` that a SIGTERM/SIGHUP arriving while it
  is being made cannot leave behind (their handlers run once the ``with`` block owns it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator

__all__ = ["exit_on_signals", "die_with_parent", "kill_group", "pid_alive", "TERMINATING_SIGNALS", "guard_pipe",
           "guard_group", "temporary_directory"]

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


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    """``with tempfile.TemporaryDirectory(prefix=prefix) as name``, safe from a signal that lands
    while the directory is made: under :func:`exit_on_signals` SIGTERM/SIGHUP raise
    ``SystemExit`` at any bytecode, and one raised between ``mkdir`` and the ``with`` left the
    directory behind. Meanwhile (main thread) the Python handlers of SIGINT/SIGTERM/SIGHUP only
    note the signal; the block, once it owns the directory, restores them and runs the noted ones
    (the directory is then removed as the exception leaves). Not a signal mask: a process-wide
    signal may be taken by any thread that does not block it, and Python runs its handler in the
    main thread whichever thread took it."""
    noted: list[int] = []
    saved: dict[int, object] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, *TERMINATING_SIGNALS):
                if callable(signal.getsignal(sig)):
                    saved[sig] = signal.signal(sig, lambda signum, frame: noted.append(signum))
        tmp = tempfile.TemporaryDirectory(prefix=prefix)
    except BaseException:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        raise
    with tmp as name:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for signum in noted:
            saved[signum](signum, None)
        yield name


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
    and the descendants of its members that left the group (a worker that called ``setsid``).

    Only processes verified to be this process's own at that moment are signalled, so a ``pid``
    that was reused after its process ended never takes an unrelated process down: the whole
    group at once (``killpg``) only while ``pid`` is this process's unreaped child (it pins the
    group id: no other group can get it until we reap it); otherwise (Linux) each process found
    in ``/proc`` is checked to be in the group of a member that descends from this process, or
    below such a member, then pinned by a pidfd (or its start time) and signalled through it.
    A group none of whose members descends from us any more (its leader reaped, the rest
    orphaned) is left to its :func:`guard_group` sentinel."""
    if pid > 1:
        _kill_tree(pid, own=False)


class _Stat:
    """The fields of ``/proc/PID/stat`` that identify a process and place it in the tree."""

    __slots__ = ("state", "ppid", "pgrp", "start")

    def __init__(self, state: str, ppid: int, pgrp: int, start: int) -> None:
        self.state, self.ppid, self.pgrp, self.start = state, ppid, pgrp, start


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()  # state ppid pgrp session ... (starttime: 20th)
        return _Stat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19]))
    except (OSError, ValueError, IndexError):
        return None


def _table() -> dict[int, _Stat]:
    """Every process of this host by pid (Linux ``/proc``; empty elsewhere)."""
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return {}
    table = {}
    for name in names:
        st = _stat(int(name))
        if st is not None:
            table[int(name)] = st
    return table


def _below(pid: int, roots: set[int], table: dict[int, _Stat]) -> bool:
    """Whether ``pid``'s chain of parents in ``table`` reaches one of ``roots``."""
    seen = set()
    while pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid].ppid
        if pid in roots:
            return True
    return False


def _unreaped_child(pid: int) -> bool:
    """``pid`` is this process's child, alive or a zombie (asked without reaping it)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, OSError, AttributeError, ValueError):
        return False
    return True


def _targets(pgid: int, own: bool, table: dict[int, _Stat]) -> list[int]:
    """The live processes of group ``pgid`` and below its members, when the group is ours:
    this process is a member (``own``), or one of its members descends from this process."""
    me = os.getpid()
    members = {p for p, st in table.items() if st.pgrp == pgid}
    if not own and not any(_below(m, {me}, table) for m in members):
        return []
    return [p for p, st in table.items()
            if p != me and st.state not in "ZX" and (p in members or _below(p, members, table))]


def _kill_verified(pid: int, seen: _Stat) -> None:
    """SIGKILL ``pid`` if it is still the process ``seen`` in the table (same start time):
    through a pidfd where the kernel has them (then no reuse of the pid can redirect it)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfds: the start time, read just before the kill
        now = _stat(pid)
        if now is not None and now.start == seen.start:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return
    try:
        now = _stat(pid)
        if now is not None and now.start == seen.start:
            signal.pidfd_send_signal(fd, 0)  # alive after the read: the read was of the pinned process
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def _kill_tree(pgid: int, *, own: bool) -> None:
    """SIGKILL group ``pgid``'s members and what they started outside it (``own``: this process
    is itself a member, so the group is ours and this process dies last, with the group)."""
    pinned = own or _unreaped_child(pgid)
    for _ in range(3):  # a member may fork while we look: look again
        table = _table()
        targets = _targets(pgid, own or pinned, table)
        if not targets:
            break
        for p in targets:
            _kill_verified(p, table[p])
    if pinned:  # the group id is ours until we reap `pgid` (or, `own`, while this process lives)
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


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
            _kill_tree(os.getpgrp(), own=True)  # the group, and what left it (setsid) below its members
        finally:
            os._exit(0)
