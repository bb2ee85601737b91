"""What the CPU cores did: CPU seconds of DataLoader worker processes, the wait of the
process's own threads for a core, the CPU other processes used, machine load.

Linux reads ``/proc/<pid>/stat`` (user + system time of a worker), ``/proc/<pid>/task/*/schedstat``
(per thread: CPU time and run-queue wait, read by :mod:`pitstop.doctor.record.clocks` at each
step boundary) and ``/proc/stat`` (the machine's busy and steal time); elsewhere these are
``None`` (not measured). The training process's own CPU time comes from
``time.process_time()`` in the instrumentation.

DataLoader workers count by the CPU they used, not by their number: a worker that sleeps on
I/O holds no core (the run's own demand is its intra-op threads plus its workers' CPU-seconds
per second).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pitstop.doctor.analysis.records import CpuRecord

__all__ = ["WorkerClock", "pid_cpu_seconds", "machine_counters", "busy_note", "window_mark", "thread_use",
           "others_cores", "cpu_record", "BUSY_THREAD"]

try:
    _TICK = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _TICK = 100

#: a thread that ran at least this share of the observed wall time did the run's work (the
#: main thread, the intra-op pool); the others (the doctor's sampler, idle helpers) are left out.
BUSY_THREAD = 0.10


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
    """Load averages and the /proc/stat jiffies (total, busy, steal) now."""
    out: dict[str, Any] = {}
    try:
        out["load_avg"] = list(os.getloadavg())
    except (AttributeError, OSError):
        out["load_avg"] = None
    try:
        with open("/proc/stat", encoding="ascii") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
        out["jiffies"], out["steal"] = sum(parts[:8]), (parts[7] if len(parts) > 7 else 0)
        out["busy"] = out["jiffies"] - parts[3] - (parts[4] if len(parts) > 4 else 0)  # less idle and iowait
    except (OSError, ValueError, IndexError):
        out["jiffies"] = out["steal"] = out["busy"] = None
    return out


def window_mark() -> dict[str, Any]:
    """One end of the observed window: the machine's counters, wall and process CPU time."""
    return {**machine_counters(), "wall": time.perf_counter(), "cpu": time.process_time()}


def thread_use(threads: dict[str, list[int]], wall: float) -> tuple[int, float, float] | None:
    """From the per-thread [CPU ns, wait ns] of the observed window (``wall`` seconds long):
    (threads that did work, their summed wait in seconds, the share of the window each of them
    waited for a core on average); None when nothing was measured."""
    if not threads or wall <= 0:
        return None
    busy = [(run, wait) for run, wait in threads.values() if run / 1e9 >= BUSY_THREAD * wall]
    if not busy:
        return None
    wait = sum(w for _, w in busy) / 1e9
    return len(busy), wait, wait / (len(busy) * wall)


def others_cores(start: dict[str, Any] | None, end: dict[str, Any] | None, children_cpu: float) -> float | None:
    """Cores other processes kept busy over the window: the machine's busy CPU time less this
    process's and its children's, per second of the window; None when not measured."""
    if not start or not end or start.get("busy") is None or end.get("busy") is None:
        return None
    wall = end["wall"] - start["wall"]
    if wall <= 0:
        return None
    machine = (end["busy"] - start["busy"]) / _TICK
    own = (end["cpu"] - start["cpu"]) + children_cpu
    return max(0.0, (machine - own) / wall)


def busy_note(cpu: CpuRecord) -> str | None:
    """A one-line warning when the machine was busy while the script ran, else None. The run's
    own share of the load is its intra-op threads plus the cores its DataLoader workers kept busy
    (their CPU use, not their number)."""
    cores, load, steal = cpu.machine_cores, cpu.load_avg, cpu.steal_share
    own = cpu.own_threads or 1
    parts = []
    from pitstop.thresholds import Thresholds

    if cores and cpu.others_cores is not None and cpu.others_cores >= Thresholds().busy_others_share * cores:
        parts.append(f"other processes kept {cpu.others_cores:.1f} of {cores} cores busy during the observed steps")
    elif cores and load is not None and load - own > 0.5 * cores:
        parts.append(f"load average {load:.1f} on {cores} cores, of which about {own:.1f} is this run's")
    if steal is not None and steal > 0.05:
        parts.append(f"{100 * steal:.0f}% of CPU time stolen by the hypervisor")
    if not parts:
        return None
    return ("the machine was busy while the script ran (" + "; ".join(parts) + "): step times are slower and "
            "noisier than on a quiet machine, and probe intervals wider")


def cpu_record(inst: Any, o: Any) -> CpuRecord:
    """What the cores did during the observed steps (``inst``: the run's instrumentation, ``o``
    its observations so far)."""
    import torch

    from pitstop.machine import machine_cores

    obs = [r for r in inst.records if r.kind == "observed"]
    n = len(obs)
    end = machine_counters()
    start = inst.machine or {}
    steal = None
    if start.get("jiffies") is not None and end.get("jiffies") is not None and end["jiffies"] > start["jiffies"]:
        steal = (end["steal"] - start["steal"]) / (end["jiffies"] - start["jiffies"])
    loaders = o.train_loaders()
    workers = max((d.num_workers or 0 for d in loaders), default=0)
    wall = sum(r.wall for r in obs)
    per_step_workers = (sum(inst.worker_cpu) / len(inst.worker_cpu)) if inst.worker_cpu else None
    children = sum(r.cpu_children or 0.0 for r in obs)
    workers_cores = (children / wall if wall > 0 and any(r.cpu_children is not None for r in obs)
                     else (per_step_workers * n / wall if per_step_workers is not None and wall > 0 else None))
    window = inst.log.cores
    sampler = getattr(inst, "sampler", None)
    mine = {f"{os.getpid()}/{sampler.native_id}"} if sampler is not None and sampler.native_id else set()
    use = thread_use({k: v for k, v in window.threads.items() if k not in mine}, wall)
    threads = torch.get_num_threads()
    return CpuRecord(process_per_step=sum(r.cpu or 0.0 for r in obs) / n if n else None,
                     data_wait_cpu_per_step=sum(inst.data_cpu) / n if n and inst.data_cpu else (0.0 if n else None),
                     workers_per_step=per_step_workers,
                     workers=workers, machine_cores=machine_cores(),
                     load_avg=(end.get("load_avg") or [None])[0], steal_share=steal,
                     own_threads=threads + min(float(workers), workers_cores or 0.0),
                     workers_cores=workers_cores,
                     threads_busy=use[0] if use else None, thread_wait_per_step=use[1] / n if use and n else None,
                     wait_share=use[2] if use else None,
                     others_cores=others_cores(window.start, window.end or (window.start and window_mark()), children))
