"""PIT601 compile: torch.compile the model so chains of ops run as fused kernels.

The tip's docs here; one module per face (``bench``, ``doctor``, ``knob``, ``trace``), imported
below so that importing the tip registers them."""

from __future__ import annotations

from pitstop.catalog import Tip


class Compile(Tip):
    code = "PIT601"
    slug = "compile"
    title = "Model run eagerly where torch.compile would fuse its kernels"
    faces = "DKEB"
    seeds = ("002", "004")
    truth = (
        "torch.compile is real but not free. Compiling `x.cos().cos()` took 14-28 s on this "
        "2-core Xeon with cold caches (varying with the load from other processes), 3.4 s in a "
        "later process once Inductor's on-disk cache was warm. It paid off where pointwise ops "
        "dominate (`x.cos().cos()` on a 64 MiB tensor: 1.7-1.8x, PIT607) and not elsewhere: a "
        "tiny MLP training step (Linear(32, 64)-ReLU-Linear(64, 10), batch 32, SGD) got slower, "
        "192 us -> 335 us (0.6x), and a matmul-bound step (4 pre-LN MLP blocks, d=256, 2.1M "
        "params, input 16x256x256, AdamW) measured 0.96x (one thread, CPU time). Seed 002's "
        "\"static graphs\" heading is dated: compile also handles changing shapes, by recompiling "
        "for them. Seed 004's \"tensor fusion\" example (`FusedLinear`) fuses nothing: it still "
        "runs two matmuls (see PIT606). Graph breaks split the graph and lose fusion: count "
        "them (PIT608). Until issue 22 the doctor's own forward hooks and saved-tensor hook ran inside "
        "the compiled region and broke it: a clean compiled MLP showed 3 breaks under the doctor "
        "and 0 alone; they now return at once while dynamo traces (0, as alone)."
    )

    what = """
        At run time the doctor checks whether the model runs compiled; what compile then does to
        it is PIT608 (graph breaks, with dynamo's reason and your line) and PIT609 (recompiles,
        the recompile limit, compile time inside the measured steps); a probe times the
        compiled model against the same module run eagerly (forward + backward on the last
        batch, without recompiling) and gives the steps after which the compile time pays off,
        and PIT601 reports a compiled model that is decidedly slower than eager. `tune` switches
        compilation on and measures it A/B on your own training, and its verdict says why a
        compiled run was slower (the same breaks and recompiles); `pitstop bench PIT601`
        measures compile time and compiled-vs-eager speed on this machine.
    """
    why = """
        In eager mode every op is a separate kernel that reads its inputs from memory and writes
        its output back, and Python dispatches each op. `torch.compile` captures the ops into a
        graph (TorchDynamo) and TorchInductor generates kernels that fuse chains of pointwise and
        reduction ops, so intermediates stay in registers and cache instead of making a round
        trip through memory; on a GPU it also launches fewer kernels (and can use CUDA graphs with
        `mode="reduce-overhead"`). Matmuls and convolutions still go to the vendor libraries.
    """
    example = """
        ```python
        model = Net()
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        ```
    """
    use_instead = """
        ```python
        model = torch.compile(Net())   # compiles on the first call, again on new shapes
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        ```
        List graph breaks and recompilations with `TORCH_LOGS="graph_breaks,recompiles" python
        train.py`, or turn any graph break into an error with `torch.compile(model,
        fullgraph=True)`. Move `print`, `.item()` and data-dependent Python branches out of the
        compiled forward.
    """
    when_not = """
        Tiny models and small batches: the step is dominated by per-call overhead that compile
        does not remove on CPU (0.6x measured here). Matmul- or conv-bound models: the heavy
        kernels are already library calls and fusion only speeds up the glue (0.96x here). Short
        runs: the compile time (tens of seconds here, minutes for large models) can exceed the
        savings. Many graph breaks leave small graphs with little to fuse, and input shapes that
        change every step trigger recompilations: pad or bucket them, or use `dynamic=True`.
    """
    references = (
        "PyTorch docs, torch.compile: https://pytorch.org/docs/stable/generated/torch.compile.html",
        "PyTorch tutorial, Introduction to torch.compile: https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html",
        "PyTorch 2.0 overview (TorchDynamo, AOTAutograd, TorchInductor): https://pytorch.org/get-started/pytorch-2.0/",
        "PyTorch Performance Tuning Guide — Fuse operations: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Seeds 002 (Static graphs: `torch.compile`), 004 (Tensor fusion and kernel fusion)",
    )
    engine = "Recipe.compile (a torch.compile mode, or None) compiles the model the step runs (after DDP wrapping); checkpoints keep the plain module's state_dict names."


# --- the faces, one module each (importing them registers them) ---
from pitstop.tips.pit601_compile.bench import CompileBench  # noqa: E402
from pitstop.tips.pit601_compile.doctor import CompileCheck, CompiledVsEagerProbe  # noqa: E402
from pitstop.tips.pit601_compile.knob import CompileKnob, compile_facts  # noqa: E402
from pitstop.tips.pit601_compile.trace import LaunchBoundTrace  # noqa: E402

__all__ = ["Compile", "CompileBench", "CompileCheck", "CompiledVsEagerProbe", "CompileKnob", "compile_facts",
           "LaunchBoundTrace"]
