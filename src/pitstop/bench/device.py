"""Which device to benchmark on, and what it is (recorded with every result)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from pitstop.machine import onednn_cap

__all__ = ["pick_device", "device_info", "cpu_model", "cpu_flags", "load_average"]

#: CPU flags that decide whether low-precision kernels are fast (bf16/fp16 matrix units).


def pick_device(requested: str | None = None) -> str:
    """``cuda`` when available, else ``cpu``; a forced ``cuda`` without one is an error."""
    import torch

    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {requested!r}; choose cpu or cuda")
    if requested == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ValueError(f"--device cuda: no CUDA device is available (torch {torch.__version__}, {build})")
    return requested


def cpu_model() -> str:
    from pitstop.machine import cpu_features

    return cpu_features().model


def cpu_flags() -> list[str]:
    """The flags of interest present in /proc/cpuinfo (empty where it does not exist)."""
    from pitstop.machine import FLAGS_OF_INTEREST, cpu_features

    have = cpu_features().flags
    return [f for f in FLAGS_OF_INTEREST if f in have]


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def device_info(device: str, threads: int) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": cpu_flags(),
        "onednn_cap": onednn_cap(),  # e.g. AVX2: bf16 is emulated whatever the CPU has
        "torch_threads": threads,
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "gpu": None,
    }
    if device == "cuda":
        from pitstop.gpu import cuda_device

        gpu = cuda_device()
        info["gpu"] = {"name": gpu.name, "capability": f"{gpu.major}.{gpu.minor}", "memory_bytes": gpu.total_memory,
                       "count": gpu.count}
    return info
