"""Small synthetic Kineto traces (2022+ schema) for tests: steps, host ops, runtime calls and
the GPU work they launch, written as real trace files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 85e9}
V100 = {"id": 0, "name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0, "totalGlobalMem": 34e9}
PID, TID = 100, 100


class Synth:
    def __init__(self, device: dict | None = None, rank: int | None = None, world: int | None = None):
        self.events: list[dict] = []
        self.device = device or A100
        self.dist = {"backend": "nccl", "rank": rank, "world_size": world} if rank is not None else None
        self.corr = 1000
        self.ext = 1

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> int:
        self.ext += 1
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                            "args": {"External id": self.ext}})
        return self.ext

    def step(self, n: int, ts: float, dur: float) -> None:
        self.op(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0, "tid": 7,
                            "ts": ts, "dur": dur, "args": {}})

    def call(self, name: str, ts: float, dur: float, ext: int = -1) -> int:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
                            "dur": dur, "args": {"correlation": self.corr, "External id": ext}})
        return self.corr

    def gpu(self, name: str, ts: float, dur: float, *, cat: str = "kernel", launch_ts: float | None = None,
            stream: int = 7, ext: int = -1, launch: str = "cudaLaunchKernel") -> None:
        corr = self.call(launch, ts - 5 if launch_ts is None else launch_ts, 3, ext)
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": {"device": 0, "stream": stream, "correlation": corr, "External id": ext}})

    def doc(self) -> dict:
        d = {"schemaVersion": 1, "deviceProperties": [self.device], "traceEvents": self.events}
        if self.dist:
            d["distributedInfo"] = self.dist
        return d

    def write(self, path: Path) -> Path:
        data = json.dumps(self.doc()).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def training(*, steps: int = 4, step_us: float = 10_000, loader_us: float = 0, kernel: str = "ampere_sgemm_128x64_nn",
             kernel_us: float = 5_000, device: dict | None = None, syncs: tuple[str, ...] = (),
             pageable: bool = False, short_kernels: int = 0, rank: int | None = None, world: int | None = None,
             comm_us: float = 0, compute_us_extra: float = 0, copy_us: float = 100, memsets: int = 0,
             optimizer_kernels: int = 0, optimizer_kernel: str = "void at::native::vectorized_elementwise_kernel<4>()",
             second_device: bool = False) -> Synth:
    """``steps`` steps: DataLoader ``loader_us`` (GPU idle), one big kernel, optional syncs,
    copies, ``short_kernels`` 3-us kernels launched 15 us apart, an all-reduce after compute,
    ``memsets`` 20-us memsets, an optimizer step launching ``optimizer_kernels`` kernels."""
    s = Synth(device, rank, world)
    for k in range(steps):
        t0 = 1_000_000 + k * step_us
        s.step(k + 1, t0, step_us)
        t = t0 + 10
        if loader_us:
            s.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, loader_us)
            t += loader_us
        if pageable:
            ext = s.op("aten::copy_", t, copy_us + 40)
            s.gpu("Memcpy HtoD (Pageable -> Device)", t + 10, copy_us, cat="gpu_memcpy", ext=ext,
                  launch="cudaMemcpyAsync")
            s.call("cudaStreamSynchronize", t + 12, copy_us, ext)
            t += copy_us + 30
        ext = s.op("aten::mm", t, 20)
        s.gpu(kernel, t + 10, kernel_us + compute_us_extra, ext=ext)
        t += 10 + kernel_us + compute_us_extra
        if comm_us:
            ext = s.op("nccl:all_reduce", t - 5, 10, cat="user_annotation")
            s.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", t, comm_us,
                  stream=20, ext=ext)
            t += comm_us
        for i in range(short_kernels):
            ext = s.op("aten::add", t, 12)
            s.gpu("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()", t + 10, 3, ext=ext)
            t += 15
        for i in range(memsets):
            ext = s.op("aten::zero_", t, 25)
            s.gpu("Memset (Device)", t + 10, 20, cat="gpu_memset", ext=ext, launch="cudaMemsetAsync")
            t += 25
        if optimizer_kernels:
            s.op("Optimizer.step#SGD.step", t, 10 + 12 * optimizer_kernels, cat="user_annotation")
            for i in range(optimizer_kernels):
                ext = s.op("aten::add_", t + 5, 10)
                s.gpu(optimizer_kernel, t + 10, 8, ext=ext)
                t += 12
        if second_device:
            s.events.append({"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm", "pid": 1, "tid": 7,
                             "ts": t, "dur": 50, "args": {"device": 1, "stream": 7, "correlation": -5}})
        for name in syncs:
            ext = s.op("aten::item" if name != "cudaDeviceSynchronize" else "train.py(12): step", t, 40)
            s.call(name, t + 5, 30, ext)
            t += 400  # the host works on after the sync before launching again
    return s
