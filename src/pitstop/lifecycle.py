"""Process lifecycle: nothing left running when pitstop is stopped (torch-free).

- :func:`exit_on_signals`: while active, SIGTERM and SIGHUP raise ``SystemExit(128 + signum)``
  in the main thread, so ``finally`` blocks and ``with`` statements run (child process groups
  are killed, temporary directories and lock files removed) instead of the interpreter dying
  on the spot. Signals set to be ignored (``nohup``) or handled by the application stay so.
- :func:`die_with_parent`: called first thing in a child process; the child is killed when the
  process that started it dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``; elsewhere a daemon
  thread polling the parent's pid).
- :func:`kill_group`: SIGKILL a child's whole process group (its DataLoader workers too).
- :func:`pid_alive`: whether a pid names a live process on this host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["exit_on_signals", "die_with_parent", "kill_group", "pid_alive", "TERMINATING_SIGNALS"]

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
    """SIGKILL the process group led by ``pid`` (a child started with ``start_new_session``)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


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
