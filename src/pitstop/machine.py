"""What this machine gives the current process (torch-free): the cores it may run on, the load
on them, and what its CPU can do. One place for the doctor, tune, lint and bench, so that
"cores" means the affinity mask everywhere (a container or ``taskset`` limits it), not the
machine's count, and "this CPU has native bf16" is read one way (the ``/proc/cpuinfo`` flags).

- :func:`cpu_features`: the CPU's model name and flags (:class:`CpuFeatures`); ``native_bf16``
  when it has AVX512-BF16 or AMX-BF16 (oneDNN's fast bf16 kernels), else bf16 autocast is
  emulated in fp32 and usually several times slower than fp32.
- :func:`bf16_slowdown_note`: a :class:`HardwareNote` when a measured bf16 slowdown is large
  and this CPU has no native bf16 (the doctor's probe and tune's autocast trial attach it).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["usable_cores", "machine_cores", "machine_load", "runnable_others", "CpuFeatures", "cpu_features",
           "HardwareNote", "bf16_slowdown_note", "BF16_FLAGS", "LARGE_SLOWDOWN"]

#: /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products, AMX tiles).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: a candidate / baseline speed ratio at or below which a slowdown is large (2x slower or worse).
LARGE_SLOWDOWN = 0.5


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model name and its ``/proc/cpuinfo`` flags (empty where the OS has no such file)."""

    model: str
    flags: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        """Whether the flags were read (False off Linux: nothing can be said about bf16)."""
        return bool(self.flags)

    @property
    def native_bf16(self) -> bool:
        return any(f in self.flags for f in BF16_FLAGS)

    @property
    def amx(self) -> bool:
        return "amx_tile" in self.flags


def _cpuinfo(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cpu_features(path: str = "/proc/cpuinfo") -> CpuFeatures:
    """The model name and flags of the first CPU listed in ``path``."""
    model, flags = None, frozenset()
    for line in _cpuinfo(path).splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
        if model is not None and flags:
            break
    return CpuFeatures(model or platform.processor() or platform.machine() or "unknown CPU", flags)


@dataclass(frozen=True)
class HardwareNote:
    """Why the hardware explains a measured result: ``feature`` (``"bf16"``) is not native on
    ``cpu`` (``missing``: the flags it lacks), and the candidate measured ``slowdown`` times
    slower than the baseline."""

    feature: str
    cpu: str
    missing: tuple[str, ...]
    slowdown: float

    def text(self) -> str:
        return (f"this CPU ({self.cpu}) has no native {self.feature} (no AVX512-BF16/AMX): {self.feature} measured "
                f"{self.slowdown:.1f}x slower than fp32")

    def to_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "cpu": self.cpu, "missing": list(self.missing), "slowdown": self.slowdown,
                "text": self.text()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareNote:
        return cls(d["feature"], d["cpu"], tuple(d.get("missing") or ()), float(d["slowdown"]))


def bf16_slowdown_note(ratio: float | None, cpu: CpuFeatures | None = None) -> HardwareNote | None:
    """A note when bf16 measured ``ratio`` (baseline / bf16 time; < 1: bf16 slower) is a large
    slowdown (at or below :data:`LARGE_SLOWDOWN`) and the CPU has no native bf16; else None."""
    cpu = cpu or cpu_features()
    if ratio is None or ratio <= 0 or ratio > LARGE_SLOWDOWN or not cpu.known or cpu.native_bf16:
        return None
    return HardwareNote("bf16", cpu.model, BF16_FLAGS, 1 / ratio)


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
