"""PIT304 tf32-matmul: let fp32 matmuls use TF32 tensor cores on NVIDIA Ampere and later."""

from __future__ import annotations

from pitstop.catalog import Tip


class Tf32Matmul(Tip):
    code = "PIT304"
    slug = "tf32-matmul"
    title = "fp32 matmuls on an Ampere+ GPU without TF32 (set_float32_matmul_precision('high'))"
    faces = "DKE"
    seeds = ()
    truth = (
        "Beyond the seeds. On NVIDIA Ampere and later GPUs PyTorch already runs fp32 "
        "*convolutions* in TF32 (`torch.backends.cudnn.allow_tf32` defaults to True) but fp32 "
        "*matmuls* in full fp32 (`torch.get_float32_matmul_precision()` is \"highest\"; the "
        "matmul default has been off since PyTorch 1.12); both defaults checked in torch 2.13. "
        "`torch.set_float32_matmul_precision(\"high\")` turns TF32 on for matmuls. It is cheap, "
        "not free: the PyTorch CUDA notes measure a 10240x10240 matmul ~7x faster on an A100 "
        "with a relative error about two orders of magnitude larger than fp32. No GPU was "
        "available to measure it here."
    )

    what = """
        At run time on an NVIDIA GPU of the Ampere generation or later (compute capability
        8.0+), the doctor checks the float32 matmul precision setting and whether the step's
        matmuls run in fp32 (outside autocast). `tune` switches
        `torch.set_float32_matmul_precision("high")` on and off on your own training and
        compares step time and loss.
    """
    why = """
        TF32 is a tensor-core math mode: inputs keep fp32's 8-bit exponent (same range) but
        are rounded to a 10-bit mantissa, and products are accumulated in fp32. Tensor cores
        process it at a much higher rate than the fp32 units, so `nn.Linear`, `matmul`,
        `cdist`, `tensordot` and other matmul users get faster with no code change.
        Tensors stay `torch.float32`; only the internal arithmetic of the matmul changes.
    """
    example = """
        ```python
        model = Transformer().cuda()          # fp32, no autocast
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())   # matmuls in full fp32
            ...
        ```
    """
    use_instead = """
        ```python
        torch.set_float32_matmul_precision("high")   # once, at start-up: TF32 matmuls
        ```
        In torch 2.13 this sets `torch.backends.cuda.matmul.fp32_precision` to `"tf32"`
        (checked); `torch.backends.cuda.matmul.allow_tf32 = True` is the older spelling of
        the same switch. Under bf16/fp16 autocast (PIT301) the autocast matmuls are already
        16-bit; TF32 then only affects the ops left in fp32.
    """
    when_not = """
        No effect on GPUs before Ampere (no TF32 units) or on the CPU: on this 2-core Xeon a
        2048x2048 fp32 matmul gave bit-identical results and the same time with "high" and
        "highest" (172 ms vs 174 ms, best of 15). No gain when the step is already in bf16/fp16
        autocast or is not matmul-bound (data loading, small layers, Python overhead).
        Numerically sensitive work (ill-conditioned solves, some scientific models, tests
        comparing against fp32 references) should keep "highest".
    """
    references = (
        "PyTorch docs, CUDA semantics — TensorFloat-32 (TF32) on Ampere (and later) devices: https://pytorch.org/docs/stable/notes/cuda.html",
        "PyTorch docs, torch.set_float32_matmul_precision: https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html",
        "NVIDIA blog, TensorFloat-32 in the A100 GPU: https://blogs.nvidia.com/blog/2020/05/14/tensorfloat-32-precision-format/",
        "Beyond the seeds",
    )
    engine = "Recipe.precision='tf32' sets torch.set_float32_matmul_precision('high') and cudnn.allow_tf32 while the step exists; Step.close() (and the end of fit) puts the previous values back."


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class TF32Check(Check, tip="PIT304"):
    requires = "cuda"
    looks_at = "fp32 matmuls/convs on Ampere+ with TF32 disabled"
    #: by kernel name: the profiled steps' GEMM/conv kernels say whether TF32 ran, not the setting
    gpu_role = "trace"
    #: the same fp32 GEMM time as PIT301's bf16: one finding, TF32 an option of it
    same_cost_as = "PIT301"

    def check(self, obs, th):
        from pitstop.gpu import tf32_capable

        if not obs.capability or not tf32_capable("nvidia", obs.capability[0]):
            return
        # cuDNN convolutions run in TF32 unless cudnn.allow_tf32 is off: count them only then
        k, s = obs.kernels, obs.settings
        fp32 = k.matmul.get("float32", 0) + (k.conv.get("float32", 0) if s.tf32_cudnn is False else 0)
        if not fp32 or s.float32_matmul_precision != "highest" or s.tf32_matmul:
            return
        yield self.finding(
            th, title="fp32 matmuls without TF32 on an Ampere+ GPU",
            evidence=f"{fp32} fp32 matmuls/convolutions per step on {obs.device_name} "
                     f"(capability {obs.capability[0]}.{obs.capability[1]}); float32_matmul_precision is 'highest'.",
            fix='torch.set_float32_matmul_precision("high") at start-up (or bf16 autocast, PIT301)',
            share=None, severity="medium")


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class TF32Knob(Knob, tip="PIT304"):
    """TF32 tensor-core math for fp32 matmuls and convolutions (NVIDIA Ampere+)."""

    name = "tf32"
    title = "TF32 matmuls/convolutions"
    order = 25
    reduced_precision = True

    def applies(self, ctx):
        if not ctx.on_cuda:
            return Applicability(False, f"CUDA only: TF32 is an NVIDIA tensor-core format (training runs on {ctx.device})")
        if ctx.capability is not None and tuple(ctx.capability) < (8, 0):
            return Applicability(False, f"TF32 needs an Ampere or newer GPU (compute capability {ctx.capability})")
        if ctx.float32_matmul_precision in ("high", "medium"):
            return Applicability(False, f"already on: float32_matmul_precision={ctx.float32_matmul_precision!r}")
        return Applicability(True)

    def label(self, value):
        return "tf32"

    def recipe_fields(self, value, ctx):
        return {"precision": "tf32"}

    def apply_in_child(self, value, **options):
        import torch

        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True

    def snippet(self, value, ctx):
        return """
            torch.set_float32_matmul_precision("high")   # TF32 matmuls
            torch.backends.cudnn.allow_tf32 = True       # TF32 convolutions (the default)
        """


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class Tf32Trace(TraceCheck, tip="PIT304"):
    looks_at = "fp32 (non-TF32) GEMM/conv kernels on an Ampere or newer NVIDIA GPU"
    #: the same fp32 GEMM time as PIT301's bf16: one finding, TF32 an option of it
    same_cost_as = "PIT301"

    def check(self, rank, th):
        p, gpu = rank.precision, rank.gpu
        if p is None or gpu is None or not p.tf32_capable:
            return
        if p.matmul_share < th.matmul_share or p.fp32_share < th.fp32_share:
            return
        impact = p.fp32_math(gpu.busy) * 0.5  # if reduced precision halves those kernels
        yield self.finding(
            th, rank, title="fp32 matmuls without TF32 on an Ampere+ GPU", impact=impact,
            evidence=(f"{pct(p.fp32_share)} of GEMM/conv time ({pct(p.matmul_share)} of kernel time) runs in plain "
                      f"fp32 (sgemm-style kernels) on {rank.device}, which runs them as TF32 on tensor cores"),
            fix="torch.set_float32_matmul_precision('high') (and torch.backends.cudnn.allow_tf32 = True)")
