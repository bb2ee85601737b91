"""What this machine gives the current process (torch-free): the cores it may run on and the
load on them. One place for the doctor, tune and lint, so that "cores" means the affinity mask
everywhere (a container or ``taskset`` limits it), not the machine's count."""

from __future__ import annotations

import os

__all__ = ["usable_cores", "machine_cores", "machine_load"]


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
