"""PIT602 cudnn-benchmark: let cuDNN time its conv algorithms when input shapes are static."""

from __future__ import annotations

from pitstop.catalog import Tip


class CudnnBenchmark(Tip):
    code = "PIT602"
    slug = "cudnn-benchmark"
    title = "cuDNN autotuner off for convolutions with static input shapes"
    faces = "DKE"
    seeds = ("001", "002", "003")
    truth = (
        "The seeds are right that `torch.backends.cudnn.benchmark = True` can speed up "
        "convolutions, that it should be set before the training loop, and that it hurts when "
        "input shapes keep changing (each new shape is benchmarked again). Two more facts: it "
        "does nothing on CPU (cuDNN is NVIDIA's GPU library), and the autotuner may choose "
        "different algorithms in different runs, so it conflicts with deterministic training "
        "(PIT902). No GPU was available to measure the gain for this catalog; `tune` measures "
        "it on yours."
    )

    what = """
        At run time the doctor checks for convolutions running on a CUDA device with
        `torch.backends.cudnn.benchmark` off, and whether their input shapes stay the same from
        step to step; it only recommends the autotuner when they do. `tune` switches it on and
        measures the step time on your own training.
    """
    why = """
        cuDNN has several algorithms for each convolution (implicit GEMM, FFT, Winograd and
        others), and which one is fastest depends on the shapes, the data type, the memory layout
        and the GPU. By default PyTorch takes the algorithm cuDNN's heuristics suggest. With
        `benchmark = True` it times the candidates the first time it meets a configuration and
        caches the fastest for the rest of the process.
    """
    example = """
        ```python
        model = ResNet().cuda()   # torch.backends.cudnn.benchmark is False by default
        for x, y in loader:       # every batch is 64x3x224x224
            ...
        ```
    """
    use_instead = """
        ```python
        torch.backends.cudnn.benchmark = True   # once, before the training loop
        model = ResNet().cuda()
        for x, y in loader:
            ...
        ```
    """
    when_not = """
        On CPU, and for models without convolutions, it changes nothing. When input shapes vary
        (variable image sizes, variable sequence lengths into 1-D convolutions), every new shape
        pays the benchmarking again and the run can get slower: pad or bucket the inputs, or
        leave it off. A shorter last batch (`drop_last=False`) costs one extra round of tuning
        per shape, which is negligible. Because the chosen algorithm can change between runs, turn
        it off for bitwise-reproducible training (`torch.use_deterministic_algorithms(True)`,
        PIT901/PIT902).
    """
    references = (
        "PyTorch docs, torch.backends.cudnn.benchmark: https://pytorch.org/docs/stable/backends.html#torch-backends-cudnn",
        "PyTorch Performance Tuning Guide — Enable cuDNN auto-tuner: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "PyTorch notes, Reproducibility — cuDNN convolution benchmarking: https://pytorch.org/docs/stable/notes/randomness.html",
        "Seeds 001 (10: cudnn.benchmark), 002 (cudnn.benchmark), 003 (cuDNN optimization, non-deterministic)",
    )
    engine = "Recipe.cudnn_benchmark turns torch.backends.cudnn.benchmark on while the step exists (off again at Step.close()), and Recipe refuses it together with deterministic=True."


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class CudnnBenchmarkCheck(Check, tip="PIT602"):
    requires = "cuda"
    looks_at = "convolutions with static input shapes and cudnn.benchmark off"

    def check(self, obs, th):
        if not obs.kernels.conv or obs.settings.cudnn_benchmark:
            return
        shapes = obs.kernels.conv_input_shapes
        if len(shapes) != 1:
            return
        yield self.finding(
            th, title="cudnn.benchmark is off for convolutions with a fixed input shape",
            evidence=f"{sum(obs.kernels.conv.values())} convolutions per step; every observed step's input had "
                     f"the shape {next(iter(shapes))}.",
            fix="torch.backends.cudnn.benchmark = True at start-up (not with varying shapes, not with PIT902)",
            severity="low")


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class CudnnBenchmarkKnob(Knob, tip="PIT602"):
    """``torch.backends.cudnn.benchmark = True`` (CUDA convolutions with static shapes)."""

    name = "cudnn-benchmark"
    title = "cudnn.benchmark"
    order = 50

    def applies(self, ctx):
        if not ctx.on_cuda:
            return Applicability(False, f"CUDA only: cuDNN autotuning (training runs on {ctx.device})")
        if not ctx.conv2d:
            return Applicability(False, "no convolution: cudnn.benchmark tunes convolution algorithms only")
        if ctx.cudnn_benchmark:
            return Applicability(False, "already on")
        return Applicability(True)

    def label(self, value):
        return "cudnn.benchmark"

    def recipe_fields(self, value, ctx):
        return {"cudnn_benchmark": True}

    def apply_in_child(self, value, **options):
        import torch

        torch.backends.cudnn.benchmark = True

    def snippet(self, value, ctx):
        return """
            torch.backends.cudnn.benchmark = True   # static input shapes; not with deterministic mode (PIT902)
        """
