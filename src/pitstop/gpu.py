"""GPU facts, in one place (torch-free to import): the live device's facts (:func:`cuda_device`,
the one reader of ``torch.cuda``'s device properties), which architectures run fp32 matmuls as
TF32, which have tensor/matrix cores, and the dense peak FLOP/s of known GPUs by dtype. The
doctor (device, capacity, MFU, PIT304), ``pitstop trace`` (kernel precision), tune and bench read
them here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PEAK_FLOPS", "peak_for", "tf32_capable", "tensor_cores", "CudaDevice", "cuda_device"]


@dataclass(frozen=True)
class CudaDevice:
    """One CUDA (or ROCm) device as torch sees it: name, compute capability, memory, how many."""

    name: str
    major: int
    minor: int
    total_memory: int
    count: int

    @property
    def capability(self) -> tuple[int, int]:
        return (self.major, self.minor)


def cuda_device(device: Any = None) -> CudaDevice:
    """The facts of ``device`` (a torch device or index; None: the current one); needs CUDA."""
    import torch

    index = torch.cuda.current_device() if device is None else device
    props = torch.cuda.get_device_properties(index)
    return CudaDevice(name=props.name, major=props.major, minor=props.minor, total_memory=int(props.total_memory),
                      count=torch.cuda.device_count())

#: Dense peak FLOP/s per GPU family (NVIDIA datasheets; SXM parts where two exist), by the dtype
#: the matmuls ran in. MFU is reported only for GPUs in this table.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12},
    "H100": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12},
    "A100": {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12, "float32": 19.5e12},
    "L4": {"bfloat16": 121e12, "float16": 121e12, "tf32": 60e12, "float32": 30e12},
    "A10": {"bfloat16": 125e12, "float16": 125e12, "tf32": 62.5e12, "float32": 31.2e12},
    "V100": {"float16": 125e12, "float32": 15.7e12},
    "T4": {"float16": 65e12, "float32": 8.1e12},
}


def peak_for(device_name: str, dtype: str) -> tuple[float | None, str]:
    """(peak FLOP/s, where the number comes from) of ``device_name`` for matmuls in ``dtype``."""
    for family, table in PEAK_FLOPS.items():
        if family in device_name:
            value = table.get(dtype) or table.get("float32")
            return value, f"{family} dense {dtype if dtype in table else 'float32'} peak (NVIDIA datasheet)"
    return None, "no peak FLOP/s known for this device"


def tf32_capable(vendor: str, major: int | None) -> bool:
    """NVIDIA Ampere or later (compute capability 8.0+): fp32 matmuls/convs can run as TF32."""
    return vendor == "nvidia" and major is not None and major >= 8


def tensor_cores(vendor: str, major: int | None) -> bool | None:
    """Whether the GPU has tensor (NVIDIA Volta+) or matrix (AMD CDNA, gfx908+) cores; None: unknown."""
    if vendor == "amd":
        return major is not None and major >= 9
    if major is None:
        return None
    return major >= 7
