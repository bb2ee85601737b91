"""PIT301 mixed-precision, trace face: fp32 GEMM/convolution kernels on a tensor-core GPU."""

from __future__ import annotations

# --- trace face ---
from pitstop.trace.check import TraceCheck, pct

__all__ = ["Fp32MathTrace"]


class Fp32MathTrace(TraceCheck, tip="PIT301"):
    looks_at = "GEMM/convolution kernel names (sgemm, cudnn <float>, Cijk_..._S...) on a tensor-core GPU"

    def check(self, rank, th):
        p, gpu = rank.precision, rank.gpu
        if p is None or gpu is None or not p.tensor_cores:
            return
        if p.matmul_share < th.matmul_share or p.fp32_share < th.fp32_share:
            return
        impact = p.fp32_math(gpu.busy) * 0.5  # if reduced precision halves those kernels
        yield self.finding(
            th, rank, title=f"fp32 matmuls and convolutions on a tensor-core GPU ({rank.device})", impact=impact,
            evidence=(f"GEMM/conv kernels are {pct(p.matmul_share)} of kernel time and {pct(p.fp32_share)} of them run "
                      f"in fp32; if bf16/fp16 halves them, about {pct(impact)} of the step is saved (an estimate: "
                      "the trace cannot tell whether the model trains well in reduced precision)"),
            fix="train under torch.autocast('cuda', dtype=torch.bfloat16) (fp16 needs a GradScaler)")
