"""PIT902 deterministic-vs-benchmark: cudnn.deterministic and cudnn.benchmark both on contradict."""

from __future__ import annotations

from pitstop.catalog import Tip


class DeterministicVsBenchmark(Tip):
    code = "PIT902"
    slug = "deterministic-vs-benchmark"
    title = "cudnn.deterministic = True together with cudnn.benchmark = True"
    faces = "LD"
    seeds = ("002", "003")
    truth = (
        "Seed 002 sets the pair the consistent way (deterministic on, benchmark off) and seed "
        "003 turns benchmark on knowing it gives up determinism. Both on is a contradiction: "
        "PyTorch's cuDNN convolution code then times only the deterministic algorithms, so you "
        "pay for deterministic kernels, yet the algorithm that wins the timing can differ from "
        "run to run and results are not reproducible across runs. The modern reproducibility "
        "switch is `torch.use_deterministic_algorithms(True)` (PIT901)."
    )

    what = """
        Flags one file that sets both `torch.backends.cudnn.deterministic = True` and
        `torch.backends.cudnn.benchmark = True`. It reports at the benchmark assignment and
        offers no fix: you have to choose one goal. At run time the doctor checks the flags
        actually in effect while training runs (another module or library may set them).
    """
    why = """
        The flags answer different questions. `benchmark` times the available convolution
        algorithms for each new input shape and keeps the fastest; PyTorch's reproducibility
        notes warn that, because of benchmarking noise, it may select different algorithms on
        subsequent runs, even on the same machine. `deterministic` restricts cuDNN to
        deterministic algorithms. With both on, the benchmark searches only among the
        deterministic ones: each run is internally consistent, but two runs can still use
        different algorithms and give different results, while the deterministic restriction
        keeps you from the fastest kernels. You get neither reproducibility nor full speed.
    """
    example = """
        ```python
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = True     # undoes run-to-run reproducibility
        ```
    """
    use_instead = """
        For reproducible runs:
        ```python
        torch.use_deterministic_algorithms(True)  # cuDNN and every other op (PIT901)
        torch.backends.cudnn.benchmark = False
        ```
        For speed, with static input shapes (PIT602):
        ```python
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = False  # the default
        ```
    """
    when_not = """
        Only cuDNN reads these flags (convolutions on NVIDIA GPUs; ROCm builds pass them on to
        MIOpen); CPU runs ignore them. If all you need is determinism within one process, for
        example comparing two forward passes of the same run, the pair does give that; say so
        with `# noqa: PIT902`.
    """
    references = (
        "PyTorch docs, Reproducibility — CUDA convolution benchmarking and CUDA convolution determinism: https://pytorch.org/docs/stable/notes/randomness.html#cuda-convolution-benchmarking",
        "PyTorch docs, torch.backends.cudnn: https://pytorch.org/docs/stable/backends.html#torch-backends-cudnn",
        "PyTorch source, aten/src/ATen/native/cudnn/Conv_v7.cpp (getValidAlgorithms keeps only CUDNN_DETERMINISTIC algorithms when deterministic is set): https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cudnn/Conv_v7.cpp",
        "Seed 002 (Freeze seeds for reproducibility), seed 003 (cudnn.benchmark gives up determinism)",
    )


# --- lint face ---
from pitstop.lint.frames import Cond
from pitstop.lint.rule import LintRule, nodes


class DeterministicVsBenchmarkRule(LintRule, tip="PIT902"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    runs = "step"  # paid every step wherever the reported line is
    message = "cudnn.benchmark = True contradicts cudnn.deterministic = True set in the same file: benchmark picks kernels by timing"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.deterministic = []  # frames around each `deterministic = True`
        self.benchmarks = []  # (node, frames)

    def visit_Assign(self, node):
        if not nodes.is_true(node.value):
            return
        for t in node.targets:
            q = self.ctx.qualname(t.target)
            if q == "torch.backends.cudnn.deterministic":
                self.deterministic.append(tuple(self.ctx.stack))
            elif q == "torch.backends.cudnn.benchmark":
                self.benchmarks.append((node, tuple(self.ctx.stack)))

    def finish(self):
        for node, frames in self.benchmarks:
            # not when the two settings sit in the two branches of one if/else (torchtune's seed.py)
            if any(not _exclusive(frames, det) for det in self.deterministic):
                self.report(node)


def _exclusive(a, b):
    """Two frame stacks in different branches (body / else) of the same ``if``."""
    return any(isinstance(x, Cond) and isinstance(y, Cond) and x.node is y.node and x.orelse != y.orelse
               for x in a for y in b)


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class DeterministicBenchmarkCheck(Check, tip="PIT902"):
    looks_at = "cudnn.deterministic and cudnn.benchmark both on while training runs"

    def check(self, obs, th):
        s = obs.settings
        if s.cudnn_deterministic and s.cudnn_benchmark:
            yield self.finding(
                th, title="cudnn.deterministic and cudnn.benchmark are both on",
                evidence="the two flags were both True while training ran: benchmark picks algorithms by timing, "
                         "deterministic restricts them; the combination is neither fastest nor a clear intent"
                         + ("" if obs.on_cuda else " (no effect on this CPU run)") + ".",
                fix="choose one: benchmark for speed, or torch.use_deterministic_algorithms(True) for reproducibility",
                kind="correctness", severity="medium" if obs.on_cuda else "low")
