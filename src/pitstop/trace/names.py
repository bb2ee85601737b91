"""What a trace's names mean (torch-free): kernel families, precisions, runtime calls.

The patterns follow the vendors' naming: cuBLAS/cuDNN/CUTLASS (``sgemm``, ``ampere_bf16_…``,
``…_s1688gemm_…``, ``cudnn::…<float…>``), rocBLAS/Tensile/hipBLASLt (``Cijk_Alik_Bljk_HHS_…``:
the first letter after the layouts is the input type), NCCL/RCCL (``ncclKernel_…``,
``ncclDevKernel_…``, ``rcclKernel…``) and the CUDA/HIP runtime.
"""

from __future__ import annotations

import re

__all__ = ["is_communication", "is_elementwise", "is_matmul", "precision_of", "SYNC_CALLS", "LAUNCH_CALLS", "is_dataloader",
           "is_optimizer_step", "short_name", "PRECISIONS"]

#: precision labels of matmul/conv kernels, reduced ones first.
PRECISIONS = ("bf16", "fp16", "tf32", "fp32", "fp64", "int8", "unknown")

_COMM = re.compile(r"^(?:void\s+)?(?:[\w:]*::)?(?:nccl|rccl)", re.IGNORECASE)
_MATMUL = re.compile(r"(?<!fb)gemm|conv|dgrad|wgrad|Cijk_|xmma|cutlass|wmma|winograd|fprop|matmul|\bmma|s1688|h1688|s884|h884"
                     r"|mfma|hipblaslt|Kernel2", re.IGNORECASE)
_TENSILE = re.compile(r"Cijk_A\w+?_B\w+?_([A-Z]\w*?)(?:_|$)")
_BF16 = re.compile(r"bf16|bfloat16|BFloat16|\bbf16")
_FP16 = re.compile(r"fp16|f16f16|\bhalf\b|__half|c10::Half|h1688|h884|h16816|hgemm|_f16_|f16_")
_TF32 = re.compile(r"tf32|s1688|s16816|1688gemm")
_FP32 = re.compile(r"sgemm|<float|float,|\bfloat\b|f32f32|_f32_|fp32|scudnn|_s884|s884gemm")
_FP64 = re.compile(r"dgemm|<double|\bdouble\b|f64")
_INT8 = re.compile(r"int8|i8i8|imma")

_POINTWISE = re.compile(r"elementwise_kernel|vectorized_elementwise|unrolled_elementwise|triton_poi_|pointwise")

SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaMemcpy",
                        "hipDeviceSynchronize", "hipStreamSynchronize", "hipMemcpy"})
LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                          "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync",
                          "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyAsync",
                          "hipMemsetAsync", "hipGraphLaunch", "hipExtLaunchKernel"})


def is_communication(name: str) -> bool:
    """An NCCL/RCCL collective or point-to-point kernel (``ncclKernel_…``, ``ncclDevKernel_…``)."""
    return bool(_COMM.match(name))


def is_matmul(name: str) -> bool:
    """A GEMM or convolution kernel: the work tensor cores speed up."""
    return bool(_MATMUL.search(name)) and not is_communication(name)


def precision_of(name: str) -> str:
    """The input precision a matmul/conv kernel's name states, or ``"unknown"``."""
    m = _TENSILE.search(name)
    if m:
        return {"S": "fp32", "H": "fp16", "B": "bf16", "D": "fp64", "I": "int8", "X": "tf32"}.get(m.group(1)[0], "unknown")
    for label, pattern in (("bf16", _BF16), ("fp16", _FP16), ("tf32", _TF32), ("int8", _INT8), ("fp64", _FP64),
                           ("fp32", _FP32)):
        if pattern.search(name):
            return label
    return "unknown"


def is_elementwise(name: str) -> bool:
    """A pointwise kernel (ATen's elementwise kernels, Triton ``triton_poi_…``)."""
    return bool(_POINTWISE.search(name))


def is_dataloader(name: str) -> bool:
    """A host op of one batch fetch: ``enumerate(DataLoader)#…__next__``."""
    return name.startswith("enumerate(DataLoader)") and "__next__" in name


def is_optimizer_step(name: str) -> bool:
    """The profiler's annotation of ``optimizer.step()`` (``Optimizer.step#SGD.step``)."""
    return name.startswith("Optimizer.step#") or name.startswith("Optimizer.step(")


def short_name(name: str, width: int = 80) -> str:
    """A kernel name without ``void`` and its argument list, cut to ``width``."""
    s = name[5:] if name.startswith("void ") else name
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    s = s[:cut]
    return s if len(s) <= width else s[: width - 1] + "…"
