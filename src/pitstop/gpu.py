"""GPU facts, in one place (torch-free): which architectures run fp32 matmuls as TF32, which
have tensor/matrix cores, and the dense peak FLOP/s of known GPUs by dtype. The doctor (MFU,
PIT304), ``pitstop trace`` (kernel precision) and tune read them here."""

from __future__ import annotations

__all__ = ["PEAK_FLOPS", "peak_for", "tf32_capable", "tensor_cores"]

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
