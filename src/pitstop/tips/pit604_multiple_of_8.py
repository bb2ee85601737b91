"""PIT604 multiple-of-8: layer widths, batch sizes and vocabularies sized for tensor-core tiles."""

from __future__ import annotations

from pitstop.catalog import Tip


class MultipleOf8(Tip):
    code = "PIT604"
    slug = "multiple-of-8"
    title = "Layer and batch sizes that are not multiples of 8 (64 for vocabularies)"
    faces = "LDB"
    seeds = ("001",)
    truth = (
        "It matters on NVIDIA tensor cores in fp16/bf16, which work on tiles whose dimensions "
        "are multiples of 8 (NVIDIA's and PyTorch's guidance); a multiple of 8 is enough, "
        "powers of two are not required, and large vocabularies are padded further (nanoGPT "
        "pads GPT-2's 50257 to 50304, a multiple of 64). On this CPU there is no multiple-of-8 "
        "cliff: a 1024xK by KxK matmul on one thread ran at 155-165 GFLOP/s in fp32 for every K "
        "tried (1000, 1017, 1020, 1023, 1024, 1025, 1032); in bf16 (AMX) rates ranged 925-1093 "
        "GFLOP/s over two runs with no consistent order between multiples of 8 and odd sizes, "
        "and only K = 1024 was consistently fastest (~1180 GFLOP/s)."
    )

    what = """
        Flags `nn.Linear`, `nn.ConvNd`, `nn.ConvTransposeNd`, `nn.LSTM`/`nn.GRU` (input and hidden
        size) and `nn.MultiheadAttention` (embed_dim) constructors with an integer size
        of 64 or more that is not divisible by 8 (a language model's vocabulary shows up at its
        output projection, `nn.Linear(d_model, vocab)`): a literal, a module-level name bound
        once to one (`VOCAB = 50257`), or an argparse option of the same file (`args.hidden`
        with `default=1000`; the message names the option). Reported at the size, no fix (the
        size is a modelling choice). `nn.Embedding` is flagged for an `embedding_dim` that is
        not a multiple of 8 and, as its own sub-pattern (`PIT604/embedding`, measured apart), for a
        `num_embeddings` of 1000 or more that is not a multiple of 64: the lookup itself is a
        gather that uses no tensor cores, but a language model's output head has the vocabulary's
        size (often sharing this weight). Unit tests and deliberate dummy models (`BoringModel`,
        `DummyModel`, ...) are not flagged either. At run time the doctor checks the sizes of the layers and of the batch
        actually used when training runs on a GPU in fp16/bf16. `pitstop bench PIT604` times a
        matmul just below, at and just above a multiple of 8 on this machine.
    """
    why = """
        Tensor cores multiply small fixed-size tiles. cuBLAS and cuDNN reach full speed when the
        matrix dimensions (batch x in_features, in_features x out_features, channel counts) fill
        those tiles and rows are aligned; otherwise they pad internally or fall back to slower
        kernels, and part of the hardware idles. A vocabulary of 50257 makes the output
        projection, often the largest matmul of a language model, run at a ragged size.
    """
    example = """
        ```python
        model = nn.Sequential(
            nn.Linear(784, 500),       # 500 is not a multiple of 8
            nn.ReLU(),
            nn.Linear(500, 10),
        )
        lm_head = nn.Linear(768, 50257)        # vocabulary not a multiple of 8 (nor 64)
        ```
    """
    use_instead = """
        ```python
        model = nn.Sequential(
            nn.Linear(784, 512),
            nn.ReLU(),
            nn.Linear(512, 10),
        )
        lm_head = nn.Linear(768, 50304)        # padded; the extra logits are never the target
        ```
        Fixed sizes of the data (784 input pixels, 10 classes) stay as they are; choose the
        sizes you are free to choose (hidden widths, batch size, padded vocabulary).
    """
    when_not = """
        On this CPU no consistent gain was measured (1024xK by KxK matmuls: flat in fp32, no
        consistent pattern in bf16); on GPUs it matters most on the tensor-core path (fp16/bf16,
        and TF32 for fp32 matmuls). Small layers whose time is dominated by overhead gain
        nothing measurable. Rounding a hidden width up adds parameters and FLOPs: 500 -> 512
        costs 2.4% more work, worth it only if the kernel gets faster by more than that.
    """
    references = (
        "PyTorch Performance Tuning Guide — Use mixed precision and AMP (set sizes to multiples of 8): https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "NVIDIA Deep Learning Performance, Matrix Multiplication Background (Tensor Core requirements): https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html",
        "nanoGPT GPTConfig.vocab_size = 50304 (\"padded up to nearest multiple of 64 for efficiency\"): https://github.com/karpathy/nanoGPT/blob/master/model.py",
        "Seed 001 (9: sizes and batch sizes as multiples of 8)",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes

_SIZES = {
    "torch.nn.Linear": (("in_features", 0), ("out_features", 1)),
    "torch.nn.Conv1d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.Conv2d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.Conv3d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.ConvTranspose1d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.ConvTranspose2d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.ConvTranspose3d": (("in_channels", 0), ("out_channels", 1)),
    "torch.nn.LSTM": (("input_size", 0), ("hidden_size", 1)),
    "torch.nn.GRU": (("input_size", 0), ("hidden_size", 1)),
    "torch.nn.MultiheadAttention": (("embed_dim", 0),),
    "torch.nn.Embedding": (("num_embeddings", 0), ("embedding_dim", 1)),
}


class MultipleOf8Rule(LintRule, tip="PIT604"):
    runs = "step"  # paid every step wherever the reported line is
    message = "layer size not a multiple of 8: tensor cores pad or fall back to slower kernels"
    in_tests = False
    dummy_models = False

    def visit_Call(self, node):
        q = self.ctx.call_name(node)
        spec = _SIZES.get(q)
        if spec is None:
            return
        layer = q.rsplit(".", 1)[1]
        for name, index in spec:
            a = nodes.arg(node, name, index)
            v = nodes.int_value(a.value) if a is not None else None
            shown = f"{name}={v}"
            if v is None and a is not None:  # a module constant (VOCAB = 50257) or an argparse default
                c = self.ctx.constant(a.value)
                if type(c) is not int:
                    continue
                v = c
                option = self.ctx.argparse_default(a.value)
                shown = f"{name}={self.ctx.source_of(a.value)} (" + (
                    f"{option.option} defaults to {v})" if option is not None else f"= {v})")
            if v is None:
                continue
            if layer == "Embedding" and name == "num_embeddings":  # its own sub-pattern, measured apart
                if v >= 1000 and v % 64:
                    self.report(a.value, f"Embedding {shown} is not a multiple of 64: an output head that shares or "
                                         "mirrors this weight (a language model's vocabulary) runs a matmul of that "
                                         f"size; pad it to {-(-v // 64) * 64} (the extra rows are never indexed)",
                                pattern="embedding")
                continue
            if v >= 64 and v % 8:
                self.report(a.value, f"{layer} {shown} is not a multiple of 8; tensor cores want "
                                     f"{v // 8 * 8} or {-(-v // 8) * 8}")


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402

_BENCH_K = (1016, 1023, 1024, 1025, 1032)


class MultipleOf8Bench(Benchmark, tip="PIT604"):
    title = "Matmul throughput (M x K times K x K) at K around 1024: multiples of 8 vs not"
    claim = Claim(
        seed="001",
        text="set the sizes of all different architectural designs and batch sizes as the multiples of 8 ... "
             "to maximize the computation efficiency of GPU",
        baseline=tuple(f"16-bit K={k}" for k in _BENCH_K if k % 8),
        candidate=tuple(f"16-bit K={k}" for k in _BENCH_K if k % 8 == 0),
        ratio_of="time per FLOP at K not a multiple of 8 (1023, 1025) / at multiples of 8 (1016, 1024, 1032), "
                 "samples pooled, in 16-bit",
        scope="gpu",  # seed 001: "to maximize the computation efficiency of GPU ... Tensor Cores of Nvidia GPUs"
    )

    def run(self, ctx):
        import torch

        m = ctx.size(tiny=32, quick=256, full=1024)
        half = torch.bfloat16
        if ctx.cuda and not torch.cuda.is_bf16_supported():
            half = torch.float16
        dtypes = {"16-bit": half, "fp32": torch.float32}
        variants, work = {}, {}
        for label, dtype in dtypes.items():
            for k in _BENCH_K:
                a = torch.randn(m, k, device=ctx.device, dtype=dtype)
                b = torch.randn(k, k, device=ctx.device, dtype=dtype)
                name = f"{label} K={k}"
                variants[name] = lambda a=a, b=b: torch.mm(a, b)
                work[name] = 2.0 * m * k * k
        measured = ctx.time(variants, work=work, work_unit="FLOP")
        odd = [k for k in _BENCH_K if k % 8]
        even = [k for k in _BENCH_K if k % 8 == 0]
        fp32 = Comparison(tuple(f"fp32 K={k}" for k in odd), tuple(f"fp32 K={k}" for k in even),
                          "the same in fp32 (time per FLOP, not multiple of 8 / multiple of 8)")
        name16 = {torch.bfloat16: "bf16", torch.float16: "fp16"}[half]
        return Outcome(
            workload=f"torch.mm of ({m} x K) by (K x K) on {ctx.device} for K in {', '.join(map(str, _BENCH_K))}; "
                     f"16-bit = {name16}; rates normalize the slightly different FLOP counts",
            measurements=measured,
            comparisons=[fp32, Comparison("16-bit K=1023", "16-bit K=1024", "16-bit K=1023 vs K=1024")],
            notes=["The seed's rule is about NVIDIA tensor cores in fp16/bf16; CPU matmul libraries tile "
                   "differently, so a CPU result says nothing about a GPU (run `pitstop bench PIT604` there)."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402
from pitstop.doctor.analysis.records import OddSize  # noqa: E402


class MultipleOf8Check(Check, tip="PIT604"):
    requires = "cuda"
    looks_at = "layer and batch sizes that are not multiples of 8 (64 for vocabularies) under fp16/bf16/TF32"

    def check(self, obs, th):
        kinds = obs.kernels.by_dtype
        tensor_cores = any(k in ("float16", "bfloat16") for k in kinds) or obs.settings.float32_matmul_precision != "highest"
        if not tensor_cores:
            return
        odd = [s for m in obs.models for s in m.odd_sizes]
        bs = obs.batch_size
        if bs and bs % 8:
            odd.append(OddSize(module="batch", sizes={"batch_size": bs}, multiple=8))
        if odd:
            listing = "; ".join(f"{s.module} " + ", ".join(f"{k}={v}" for k, v in s.sizes.items()) for s in odd[:6])
            yield self.finding(
                th, title="Sizes that are not multiples of 8 (tensor-core alignment)",
                evidence=f"{len(odd)} sizes: {listing}.", fix="pad sizes to a multiple of 8 (vocabularies to 64)",
                severity="low")
