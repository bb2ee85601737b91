"""The one profiled step (FLOPs, kernel precision and layout, layer data flow) and the trace.

These measurements disturb timing, so they run on a step of their own after the observed
steps: ``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs, a small
``TorchDispatchMode`` records the dtype and memory format of every matmul and convolution
actually executed (after autocast), and forward hooks record which layer fed which
(a ``Conv2d`` whose output goes straight into a ``BatchNorm2d``, two ``Linear`` layers
with nothing between). ``--trace`` runs a few more steps under ``torch.profiler``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["KernelCensus", "DataFlow", "StepProfiler", "Tracer", "PEAK_FLOPS"]

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_mm"}
_CONV = {"convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution"}

#: Dense peak FLOP/s per GPU family (NVIDIA datasheets; SXM parts where two exist), by
#: the dtype the matmuls ran in. MFU is reported only for GPUs in this table.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12},
    "H100": {"bfloat16": 989e12, "float16": 989e12, "tf32": 494e12, "float32": 67e12},
    "A100": {"bfloat16": 312e12, "float16": 312e12, "tf32": 156e12, "float32": 19.5e12},
    "L4": {"bfloat16": 121e12, "float16": 121e12, "tf32": 60e12, "float32": 30e12},
    "A10": {"bfloat16": 125e12, "float16": 125e12, "tf32": 62.5e12, "float32": 31.2e12},
    "V100": {"float16": 125e12, "float32": 15.7e12},
    "T4": {"float16": 65e12, "float32": 8.1e12},
}


class KernelCensus(TorchDispatchMode):
    """Counts matmuls/convolutions by dtype and convolution inputs by memory format."""

    def __init__(self) -> None:
        super().__init__()
        self.matmul: Counter[str] = Counter()
        self.conv: Counter[str] = Counter()
        self.conv_channels_last = 0
        self.conv_nchw = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in _MATMUL or name in _CONV:
            import torch

            x = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if x is not None:
                dtype = str(x.dtype).replace("torch.", "")
                if name in _MATMUL:
                    self.matmul[dtype] += 1
                else:
                    self.conv[dtype] += 1
                    if x.dim() == 4:
                        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
                            self.conv_channels_last += 1
                        else:
                            self.conv_nchw += 1
        return func(*args, **(kwargs or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"matmul": dict(self.matmul), "conv": dict(self.conv),
                "conv_channels_last": self.conv_channels_last, "conv_nchw": self.conv_nchw}


class DataFlow:
    """Which leaf layer's output went, untouched, into which next layer (one forward)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.last: tuple[Any, Any, int] | None = None  # (module, output, output._version)
        self.conv_bias_bn: list[list[str]] = []
        self.linear_linear: list[dict[str, Any]] = []

    def pre(self, module, args) -> None:
        from torch import nn

        if self.last is None or not args:
            return
        prev, out, version = self.last
        x = args[0]
        if x is not out or getattr(x, "_version", -1) != version:
            return
        a, b = self.names.get(id(prev), type(prev).__name__), self.names.get(id(module), type(module).__name__)
        if isinstance(prev, nn.modules.conv._ConvNd) and prev.bias is not None \
                and isinstance(module, nn.modules.batchnorm._BatchNorm):
            self.conv_bias_bn.append([a, b])
        if type(prev) is nn.Linear and type(module) is nn.Linear:
            i, h, o = prev.in_features, prev.out_features, module.out_features
            saved = i * h + h * o - i * o
            if saved > 0:
                self.linear_linear.append({"pair": [a, b], "saved_macs": saved, "macs": i * h + h * o})

    def post(self, module, output) -> None:
        if next(module.children(), None) is not None:
            return  # containers: only leaves feed each other
        self.last = (module, output, getattr(output, "_version", -1))


class StepProfiler:
    """FlopCounterMode + KernelCensus around one step."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self.flops = FlopCounterMode(display=False)
        self.census = KernelCensus()
        self.total_flops: int | None = None
        self.active = False

    def start(self) -> None:
        self.flops.__enter__()
        self.census.__enter__()
        self.active = True

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self.census.__exit__(None, None, None)
        self.flops.__exit__(None, None, None)
        self.total_flops = int(self.flops.get_total_flops())


class Tracer:
    """``torch.profiler`` around a few steps, exported as a Chrome/Perfetto trace."""

    def __init__(self, out_dir: str) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.dir = Path(out_dir)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.prof = profile(activities=acts, record_shapes=True)
        self.path: str | None = None
        self.active = False

    def start(self) -> None:
        self.prof.__enter__()
        self.active = True

    def stop(self) -> str | None:
        if not self.active:
            return self.path
        self.active = False
        self.prof.__exit__(None, None, None)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "pitstop_trace.json"
        self.prof.export_chrome_trace(str(path))
        self.path = str(path)
        return self.path


def peak_for(device_name: str, dtype: str) -> tuple[float | None, str]:
    for family, table in PEAK_FLOPS.items():
        if family in device_name:
            value = table.get(dtype) or table.get("float32")
            return value, f"{family} dense {dtype if dtype in table else 'float32'} peak (NVIDIA datasheet)"
    return None, "no peak FLOP/s known for this device"
