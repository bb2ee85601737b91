"""What this machine gives the current process (torch-free): the cores it may run on, the load
on them, and what its CPU can do. One place for the doctor, tune, lint and bench, so that
"cores" means the affinity mask everywhere (a container or ``taskset`` limits it), not the
machine's count, and "this CPU has native bf16" is read one way (the ``/proc/cpuinfo`` flags).

- :func:`cpu_features`: the CPU's model name and flags (:class:`CpuFeatures`); ``native_bf16``
  when it has AVX512-BF16 or AMX-BF16 (oneDNN's fast bf16 kernels) and oneDNN may use them,
  else bf16 autocast is emulated in fp32 and usually several times slower than fp32. oneDNN
  may be capped below the CPU: ``ONEDNN_MAX_CPU_ISA`` (or ``DNNL_MAX_CPU_ISA``) in the process's
  environment, which oneDNN itself reads, limits it to an older ISA (``AVX2``: what an
  AVX2-only CPU gets; measured here, see docs/guide/hardware.md).
- :func:`bf16_slowdown_note`: a :class:`HardwareNote` when a measured bf16 slowdown is large
  and this CPU has no native bf16 (the doctor's probe and tune's autocast trial attach it).
- :func:`bf16_probe_rule`: where bf16 is not native, one round that measures it more than 2x
  slower than fp32 is the verdict (the doctor's precision probe stops there instead of timing
  emulated bf16 for rounds).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["usable_cores", "machine_cores", "machine_load", "runnable_others", "CpuFeatures", "cpu_features",
           "HardwareNote", "bf16_slowdown_note", "bf16_probe_rule", "onednn_cap", "BF16_FLAGS", "LARGE_SLOWDOWN",
           "ONEDNN_ISAS", "ONEDNN_CAP_VARS", "FLAGS_OF_INTEREST", "PROC_CPUINFO"]

#: where Linux describes the CPU; a file in its format given instead (``pitstop doctor --cpuinfo``)
#: describes another CPU: what pitstop would say there (the tests inject CPUs this way).
PROC_CPUINFO = "/proc/cpuinfo"

#: the /proc/cpuinfo flags pitstop reads or reports (vector ISA, native bf16/fp16, AMX tiles).
FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
#: /proc/cpuinfo flags of native bf16 arithmetic (AVX512-BF16 dot products, AMX tiles).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: a candidate / baseline speed ratio at or below which a slowdown is large (2x slower or worse).
LARGE_SLOWDOWN = 0.5
#: oneDNN's CPU ISAs, oldest first (names of its ``dnnl_cpu_isa_t``; aliases share a rank).
ONEDNN_ISAS: dict[str, int] = {
    "SSE41": 0, "AVX": 1, "AVX2": 2, "AVX2_VNNI": 3, "AVX2_VNNI_2": 4, "AVX512_CORE": 5, "AVX512_CORE_VNNI": 6,
    "AVX512_CORE_BF16": 7, "AVX10_1_512": 8, "AVX512_CORE_FP16": 8, "AVX10_1_512_AMX": 9, "AVX512_CORE_AMX": 9,
    "AVX10_1_512_AMX_FP16": 10, "AVX512_CORE_AMX_FP16": 10}
#: the environment variables oneDNN reads for its cap (the first one set wins, as in oneDNN).
ONEDNN_CAP_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
_CAP_VARS_TEXT = "/".join(ONEDNN_CAP_VARS)


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model name and its ``/proc/cpuinfo`` flags (empty where the OS has no such file).

    ``source`` is the file the description was read from: :data:`PROC_CPUINFO`, or a file given
    in its place (an injected CPU: the report says so)."""

    model: str
    flags: frozenset[str] = frozenset()
    cap: str | None = None   # oneDNN's ISA cap from the environment (None: oneDNN uses what the CPU has)
    source: str = PROC_CPUINFO

    @property
    def injected(self) -> bool:
        """The description was read from another file than the OS's own."""
        return self.source != PROC_CPUINFO

    def describe(self) -> str:
        """One line: the model, the flags of interest, the cap, and where it was read if injected."""
        have = [f for f in FLAGS_OF_INTEREST if f in self.flags]
        text = f"{self.model} ({', '.join(have) if have else 'none of ' + '/'.join(FLAGS_OF_INTEREST[:3])})"
        if self.cap:
            text += f", oneDNN capped at {self.cap}"
        return text + (f", described by {self.source}" if self.injected else "")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model": self.model, "flags": sorted(self.flags), "native_bf16": self.native_bf16,
                             "amx": self.amx, "source": self.source}
        if self.cap:
            d["cap"] = self.cap
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CpuFeatures:
        return cls(str(d["model"]), frozenset(d.get("flags") or ()), d.get("cap"), str(d.get("source") or PROC_CPUINFO))

    @property
    def known(self) -> bool:
        """Whether the flags were read (False off Linux: nothing can be said about bf16)."""
        return bool(self.flags)

    @property
    def bf16_flags(self) -> bool:
        """The CPU has native bf16 arithmetic (whatever oneDNN is allowed to use)."""
        return any(f in self.flags for f in BF16_FLAGS)

    @property
    def capped_below_bf16(self) -> bool:
        """oneDNN is capped below AVX512_CORE_BF16: its bf16 kernels are emulated whatever the CPU has."""
        return self.cap is not None and ONEDNN_ISAS[self.cap] < ONEDNN_ISAS["AVX512_CORE_BF16"]

    @property
    def native_bf16(self) -> bool:
        return self.bf16_flags and not self.capped_below_bf16

    @property
    def amx(self) -> bool:
        return "amx_tile" in self.flags


def _cpuinfo(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def onednn_cap(environ: Mapping[str, str] | None = None) -> str | None:
    """oneDNN's ISA cap in ``environ`` (default: this process's environment, which oneDNN reads
    too), upper-cased; None when unset, ``DEFAULT``/``ALL``, or a name oneDNN does not know."""
    env = os.environ if environ is None else environ
    value = next((env[v] for v in ONEDNN_CAP_VARS if env.get(v)), None)
    value = value.strip().upper() if value else None
    return value if value in ONEDNN_ISAS else None


def cpu_features(path: str | None = None, environ: Mapping[str, str] | None = None) -> CpuFeatures:
    """The model name and flags of the first CPU listed in ``path`` (default
    :data:`PROC_CPUINFO`), and oneDNN's ISA cap in ``environ`` (:func:`onednn_cap`)."""
    path = path or PROC_CPUINFO
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
    return CpuFeatures(model or platform.processor() or platform.machine() or "unknown CPU", flags, onednn_cap(environ),
                       path)


@dataclass(frozen=True)
class HardwareNote:
    """Why the hardware explains a measured result: ``feature`` (``"bf16"``) is not native on
    ``cpu`` (``missing``: the flags it lacks, or ``cap``: the CPU has them but oneDNN is capped
    below them in this process's environment), and the candidate measured ``slowdown`` times
    slower than the baseline."""

    feature: str
    cpu: str
    missing: tuple[str, ...]
    slowdown: float
    cap: str | None = None

    def text(self) -> str:
        why = (f"has AVX512-BF16 but oneDNN is capped at {self.cap} by {_CAP_VARS_TEXT}: no native {self.feature} "
               "in this process" if self.cap else f"has no native {self.feature} (no AVX512-BF16/AMX)")
        return f"this CPU ({self.cpu}) {why}: {self.feature} measured {self.slowdown:.1f}x slower than fp32"

    def to_dict(self) -> dict[str, Any]:
        d = {"feature": self.feature, "cpu": self.cpu, "missing": list(self.missing), "slowdown": self.slowdown,
             "text": self.text()}
        if self.cap:
            d["cap"] = self.cap
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareNote:
        return cls(d["feature"], d["cpu"], tuple(d.get("missing") or ()), float(d["slowdown"]), d.get("cap"))


def bf16_slowdown_note(ratio: float | None, cpu: CpuFeatures | None = None) -> HardwareNote | None:
    """A note when bf16 measured ``ratio`` (baseline / bf16 time; < 1: bf16 slower) is a large
    slowdown (at or below :data:`LARGE_SLOWDOWN`) and bf16 is not native here (the CPU lacks
    the flags, or oneDNN is capped below them); else None."""
    cpu = cpu or cpu_features()
    if ratio is None or ratio <= 0 or ratio > LARGE_SLOWDOWN or not cpu.known or cpu.native_bf16:
        return None
    if cpu.bf16_flags:
        return HardwareNote("bf16", cpu.model, (), 1 / ratio, cpu.cap)
    return HardwareNote("bf16", cpu.model, BF16_FLAGS, 1 / ratio)


def bf16_probe_rule(cpu: CpuFeatures, baseline: str, candidate: str) -> dict[str, Any]:
    """How a bf16-vs-fp32 probe may time on ``cpu``: where bf16 is not native (no AVX512-BF16/AMX,
    or oneDNN capped below them) and known so, ``{"warmup": 1, "settle": rule}``: no warm-up call
    beyond the first, and ``rule`` (given the rounds so far, variant -> samples with ``wall`` and
    ``cpu``) ends the rounds as soon as one round measured ``candidate`` at or below
    :data:`LARGE_SLOWDOWN` of ``baseline``'s speed (on CPU time where measured, else wall time),
    returning why;
    ``{}`` where bf16 may be native (time as usual)."""
    if not cpu.known or cpu.native_bf16:
        return {}
    why = f"oneDNN capped at {cpu.cap}" if cpu.bf16_flags else "no AVX512-BF16/AMX"

    def settle(samples: Mapping[str, Any]) -> str | None:
        b, c = samples.get(baseline) or [], samples.get(candidate) or []
        if not b or not c:
            return None
        clock = "cpu" if getattr(b[-1], "cpu", None) and getattr(c[-1], "cpu", None) else "wall"  # CPU: load distorts it least
        ratio = getattr(b[-1], clock) / getattr(c[-1], clock) if getattr(c[-1], clock, None) else None
        if ratio is None or ratio > LARGE_SLOWDOWN:
            return None
        return (f"{candidate} measured {1 / ratio:.1f}x slower than {baseline} ({clock} time) in a round on a CPU "
                f"without native bf16 ({why}): the hardware's answer, no more rounds")
    return {"warmup": 1, "settle": settle}


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
