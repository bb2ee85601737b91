"""What this machine gives the current process (torch-free): the cores it may run on and the
load on them. One place for the doctor, tune and lint, so that "cores" means the affinity mask
everywhere (a container or ``taskset`` limits it), not the machine's count."""

from __future__ import annotations

import os
import time

__all__ = ["usable_cores", "machine_cores", "machine_load", "runnable_others"]


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_cores() -> int | None:
    """CPUs of the whole machine (what the 1-minute load average is measured against)."""
    return os.cpu_count()


def machine_load() -> tuple[float, int] | None:
    """(1-minute load average, usable cores), or None where the OS does not say."""
    try:
        return os.getloadavg()[0], usable_cores()
    except (OSError, AttributeError):
        return None


def _procs_running() -> int | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def runnable_others(samples: int = 7, interval: float = 0.05) -> float | None:
    """How many *other* tasks are runnable right now (Linux ``procs_running`` less this
    process's own sampling thread), the median of ``samples`` reads ``interval`` seconds
    apart; None where the OS does not say. Unlike the 1-minute load average it sees a load
    that started a moment ago, and the median ignores a task that ran for one read."""
    reads = []
    for i in range(samples):
        n = _procs_running()
        if n is None:
            return None
        reads.append(max(0, n - 1))
        if i < samples - 1:
            time.sleep(interval)
    reads.sort()
    return float(reads[len(reads) // 2])
