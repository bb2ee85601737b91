"""What the CPU cores did: CPU seconds of DataLoader worker processes, machine load.

Linux reads ``/proc/<pid>/stat`` (user + system time of a worker) and ``/proc/stat``
(the machine's steal time); elsewhere these are ``None`` (not measured). The training
process's own CPU time comes from ``time.process_time()`` in the instrumentation.
"""

from __future__ import annotations

import os
from typing import Any

from pitstop.doctor.analysis.records import CpuRecord

__all__ = ["WorkerClock", "pid_cpu_seconds", "machine_counters", "busy_note"]

try:
    _TICK = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICK = 100


def pid_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (its threads included), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


class WorkerClock:
    """CPU seconds used by a set of worker processes since the last :meth:`read`."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}
        self.available = os.path.exists("/proc/self/stat")

    def add(self, pids) -> None:
        if not self.available:
            return
        for pid in pids:
            if pid is not None and pid not in self.last:
                v = pid_cpu_seconds(pid)
                if v is not None:
                    self.last[pid] = v

    def read(self) -> float:
        total = 0.0
        for pid, before in list(self.last.items()):
            now = pid_cpu_seconds(pid)
            if now is None:  # the worker exited: its last interval is lost
                del self.last[pid]
                continue
            total += max(0.0, now - before)
            self.last[pid] = now
        return total


def machine_counters() -> dict[str, Any]:
    """Load averages and the /proc/stat jiffies (total, steal) now."""
    out: dict[str, Any] = {}
    try:
        out["load_avg"] = list(os.getloadavg())
    except (AttributeError, OSError):
        out["load_avg"] = None
    try:
        with open("/proc/stat", encoding="ascii") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
        out["jiffies"], out["steal"] = sum(parts[:8]), (parts[7] if len(parts) > 7 else 0)
    except (OSError, ValueError):
        out["jiffies"] = out["steal"] = None
    return out


def busy_note(cpu: CpuRecord) -> str | None:
    """A one-line warning when the machine was busy while the script ran, else None."""
    cores, load, steal = cpu.machine_cores, cpu.load_avg, cpu.steal_share
    own = cpu.own_threads or 1
    parts = []
    if cores and load is not None and load - own > 0.5 * cores:
        parts.append(f"load average {load:.1f} on {cores} cores, of which about {own:g} is this run's")
    if steal is not None and steal > 0.05:
        parts.append(f"{100 * steal:.0f}% of CPU time stolen by the hypervisor")
    if not parts:
        return None
    return ("the machine was busy while the script ran (" + "; ".join(parts) + "): step times are slower and "
            "noisier than on a quiet machine, and probe intervals wider")
