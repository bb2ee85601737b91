"""Synthetic profiled windows (Kineto traces) for the four loops of issue 27, one per row, and a
CUDA-graph step: what the doctor's profiled steps would record on an H100 for each, written
with :mod:`trace_synth` so the doctor's GPU evidence path is tested on CPU."""

from __future__ import annotations

from trace_synth import Synth

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "totalGlobalMem": 85e9}
#: a cuDNN convolution kernel that runs in TF32 (its name says so), and an elementwise kernel
TF32_CONV = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1"
FP32_GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>()"

__all__ = ["starved_input", "device_sync", "launch_bound", "tf32_convs", "cuda_graph", "graphed_step", "compiled_step",
           "fp32_gemms", "H100", "TRITON"]
#: an Inductor kernel (Triton): fusion's output, not an unfused elementwise chain
TRITON = "triton_poi_fused_add_gelu_mul_0"


def starved_input(steps: int = 5) -> Synth:
    """ResNet, DataLoader with 0 workers: 16 ms in ``__next__`` (GPU idle), 4 ms of TF32 convs."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 20_000
        s.step(k + 1, t0, 20_000)
        s.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 10, 16_000)
        t = t0 + 16_020
        for _ in range(4):
            ext = s.op("aten::cudnn_convolution", t, 20)
            s.gpu(TF32_CONV, t + 10, 950, ext=ext)
            t += 960
    return s


def device_sync(steps: int = 5) -> Synth:
    """Small GPT in fp32, batches made on the GPU, ``synchronize()`` + ``empty_cache()`` every
    step: the host blocks until the GPU drains, then spends 2 ms before launching again."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 10_000
        s.step(k + 1, t0, 10_000)
        ext = s.op("aten::randint", t0 + 10, 20)
        s.gpu("void at::native::randint_kernel()", t0 + 30, 5, launch_ts=t0 + 15, ext=ext)
        for i in range(2):
            ext = s.op("aten::mm", t0 + 40 + 30 * i, 20)
            s.gpu(FP32_GEMM, t0 + 60 + 3_000 * i, 3_000, launch_ts=t0 + 45 + 30 * i, ext=ext)
        ext = s.op("train.py(30): step", t0 + 100, 5_970)
        s.call("cudaDeviceSynchronize", t0 + 105, 5_960, ext)  # until the GPU drained (t0 + 6060)
        s.op("aten::empty_cache", t0 + 6_080, 100)
        # the host then works ~3.8 ms before the next step launches its first kernel
    return s


def launch_bound(steps: int = 5) -> Synth:
    """A well-written small net at ~2.4 ms per step: 200 kernels of 3 us launched 12 us apart."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 2_400
        s.step(k + 1, t0, 2_400)
        t = t0 + 10
        for _ in range(200):
            ext = s.op("aten::add", t, 8)
            s.gpu(ADD, t + 8, 3, ext=ext)
            t += 12
    return s


def tf32_convs(steps: int = 5) -> Synth:
    """A fed convolutional net whose convolutions all run in TF32 (cuDNN's default)."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 10_000
        s.step(k + 1, t0, 10_000)
        t = t0 + 10
        for _ in range(9):
            ext = s.op("aten::cudnn_convolution", t, 20)
            s.gpu(TF32_CONV, t + 10, 1_090, ext=ext)
            t += 1_100
    return s


def cuda_graph(steps: int = 5) -> Synth:
    """A ``mode="reduce-overhead"`` step: one ``cudaGraphLaunch`` replays 200 short kernels
    back to back (they carry the graph launch's correlation id)."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 1_000
        s.step(k + 1, t0, 1_000)
        ext = s.op("CUDAGraph::replay", t0 + 5, 30)
        corr = s.call("cudaGraphLaunch", t0 + 10, 20, ext)
        t = t0 + 40
        for _ in range(200):
            s.events.append({"ph": "X", "cat": "kernel", "name": ADD, "pid": 0, "tid": 7, "ts": t, "dur": 4.7,
                             "args": {"device": 0, "stream": 7, "correlation": corr, "External id": ext}})
            t += 4.75
    return s


def graphed_step(steps: int = 5, *, per_graph: int = 50, optimizer: int = 150, gap: float = 12) -> Synth:
    """A ``mode="reduce-overhead"`` compiled step (forward and backward replayed by one
    ``cudaGraphLaunch`` each: ``per_graph`` Triton kernels back to back each) and an eager
    for-loop optimizer after it: ``optimizer`` elementwise kernels of 3 us launched ``gap`` us
    apart (the GPU idles between them)."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 3_000
        s.step(k + 1, t0, 3_000)
        s.op("Torch-Compiled Region: 0/0", t0 + 5, 300)
        for g, base in enumerate((t0 + 10, t0 + 400)):
            ext = s.op("CompiledFunction" if g == 0 else "CompiledFunctionBackward", base, 30)
            corr = s.call("cudaGraphLaunch", base + 5, 20, ext)
            t = base + 40
            for _ in range(per_graph):
                s.events.append({"ph": "X", "cat": "kernel", "name": TRITON, "pid": 0, "tid": 7, "ts": t, "dur": 4.0,
                                 "args": {"device": 0, "stream": 7, "correlation": corr, "External id": ext}})
                t += 4.0
        s.op("Optimizer.step#AdamW.step", t0 + 700, optimizer * gap + 20, cat="user_annotation")
        t = t0 + 710
        for _ in range(optimizer):
            ext = s.op("aten::add_", t, 8)
            s.gpu(ADD, t + 8, 3, ext=ext)
            t += gap
    return s


def compiled_step(steps: int = 5, *, compiled: bool = True, kernels: int = 120) -> Synth:
    """A default-mode compiled step (no CUDA graphs): each compiled region launches ``kernels``
    Triton kernels one by one (3 us, 12 us apart); ``compiled=False``: the same script's window run
    eagerly (ATen elementwise kernels, no compiled region): what a profiled window that lost the
    compiled code looks like."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * 2_000
        s.step(k + 1, t0, 2_000)
        if compiled:
            s.op("Torch-Compiled Region: 0/0", t0 + 5, 1_500)
            outer = s.op("CompiledFunction", t0 + 8, 1_480)
        t = t0 + 10
        for _ in range(kernels):
            ext = outer if compiled else s.op("aten::add", t, 8)
            s.gpu(TRITON if compiled else ADD, t + 8, 3, ext=ext)
            t += 12
    return s


def fp32_gemms(steps: int = 5, *, step_us: float = 10_000) -> Synth:
    """An fp32 MLP on an H100 with default settings: plain fp32 GEMM kernels (no TF32) fill 80%
    of each ``step_us`` step: PIT301 (bf16) and PIT304 (TF32) both see the same GEMM time."""
    s = Synth(H100)
    for k in range(steps):
        t0 = 1_000_000 + k * step_us
        s.step(k + 1, t0, step_us)
        t = t0 + 10
        for _ in range(4):
            ext = s.op("aten::mm", t, 20)
            s.gpu(FP32_GEMM, t + 10, 0.2 * step_us, ext=ext)
            t += 0.2 * step_us + 10
    return s
