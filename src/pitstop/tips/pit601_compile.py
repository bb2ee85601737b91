"""PIT601 compile: torch.compile the model so chains of ops run as fused kernels."""

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


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Outcome  # noqa: E402


class CompileBench(Benchmark, tip="PIT601"):
    title = "TinyGPT training step (forward + backward): eager vs torch.compile, compile time apart"
    compiles = True
    claim = Claim(
        seed="002",
        text="torch.compile() ... compiles [the model] into low-level compute kernels in a manner that is "
             "optimal for the underlying training accelerator, using techniques such as kernel fusion",
        baseline="eager step",
        candidate="compiled step",
        ratio_of="median time of a training step (forward + loss + backward) eager / compiled",
        scope="any",  # "the underlying training accelerator": whatever device trains; Inductor compiles for CPUs too
    )

    def run(self, ctx):
        import torch
        from torch.nn import functional as F

        from pitstop.examples.models import make_gpt

        torch.manual_seed(0)
        if ctx.cuda:  # CPU size on an H100: 0.95x (launch-bound); under bf16 the fused glue is a real share
            batch, n_layer, seq, d, heads = ctx.size(tiny=(2, 1, 16, 64, 2), quick=(8, 2, 256, 512, 8),
                                                     full=(16, 2, 512, 512, 8))
            half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            precision = ("bf16" if half is torch.bfloat16 else "fp16") + " autocast (eager and compiled)"
        else:
            (batch, n_layer), seq, d, heads, half, precision = ctx.size(tiny=(2, 1), quick=(4, 2), full=(16, 2)), \
                64, 128, 4, None, "fp32"
        model = make_gpt(naive=False, n_layer=n_layer, n_embd=d, n_head=heads, block_size=seq, dropout=0.0)
        model, idx = model.to(ctx.device), torch.randint(0, 1024, (batch, seq + 1), device=ctx.device)
        x, y = idx[:, :-1], idx[:, 1:]

        def step(m):
            model.zero_grad(set_to_none=True)
            with torch.autocast(ctx.device, dtype=half or torch.bfloat16, enabled=half is not None):
                loss = F.cross_entropy(m(x).flatten(0, 1).float(), y.flatten())
            loss.backward()

        compiled, compile_time = ctx.compile(model, step)
        measured = ctx.time({"eager step": lambda: step(model), "compiled step": lambda: step(compiled)})
        eager_s, compiled_s = (m.summary.median for m in measured)
        notes = []
        if compiled_s < eager_s:
            steps = compile_time.samples[0] / (eager_s - compiled_s)
            notes.append(f"At this gain the compile time is paid back after about {steps:,.0f} steps.")
        else:
            notes.append("No speed-up here: the compile time is never paid back on this model and machine.")
        notes.append("Matmuls stay library calls under compile; fusion only speeds up the pointwise glue "
                     "(LayerNorm, GELU, residual adds), so small or matmul-bound models gain little.")
        return Outcome(f"the bundled TinyGPT ({n_layer} layers, d={d}, {heads} heads, vocab 1024, "
                       f"{sum(p.numel() for p in model.parameters()):,} params), "
                       f"batch {batch} x {seq} tokens, {precision} on {ctx.device}; step = forward + cross-entropy + "
                       f"backward, no optimizer; torch.compile default mode (Inductor)",
                       [*measured, compile_time], notes=notes)


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class CompileCheck(Check, tip="PIT601"):
    """What compile does to a compiled model is PIT608 (graph breaks) and PIT609 (recompiles);
    this check reports compilation *inside the observed steps* that is not a recompile (the
    first compile of a graph, a lazily compiled backward, the eval-mode graph): those steps
    then time the compiler, not the training. For an eager model it only says why the doctor
    does not try compiling."""

    looks_at = "whether the trained model is torch.compile'd and compiles inside the observed steps"

    def skip_reason(self, obs):
        if not (obs.compile and obs.compile.compiled):
            cost = "on a small CPU" if not obs.on_cuda else "for a real model"
            return (f"the model is not compiled; compiling takes tens of seconds {cost}, so the doctor "
                    "does not try it: `pitstop tune` measures torch.compile on your training")
        return super().skip_reason(obs)

    def check(self, obs, th):
        c = obs.compile
        p = obs.probes.get("compile")
        if p is not None and p.interval is not None and p.interval[1] < 1 / th.probe_speedup and p.seconds:
            eager, compiled = p.seconds.get("eager", 0.0), p.seconds.get("compiled", 0.0)
            share = min(1.0, (compiled - eager) / obs.mean_step) if obs.mean_step else None
            yield self.finding(
                th, title="the compiled model is slower than eager",
                evidence=f"forward+backward on the last batch: compiled {compiled * 1e3:.2f} ms, eager "
                         f"{eager * 1e3:.2f} ms ({p.speedup:.2f}x, interval {p.interval[0]:.2f}-{p.interval[1]:.2f}x, "
                         f"{p.runs} rounds); compiling took {c.compile_s:.1f} s over the run.",
                fix="remove torch.compile for this model, or first remove its graph breaks and recompiles "
                    "(PIT608, PIT609) and measure again with pitstop tune",
                share=share)
        window = obs.mean_step * obs.steps_observed
        if not (c.compile_s_observed and window) or c.recompiles:  # recompiles: PIT609 reports that time
            return
        share = c.compile_s_observed / window
        yield self.finding(
            th, title="torch.compile compiled inside the observed steps",
            evidence=f"{c.compile_s_observed:.1f} s of the {window:.1f} s of observed steps were compiling "
                     f"({c.compile_s:.1f} s over the run, {c.compilations} compilations): the step times include it.",
            fix="measure after compilation (pitstop doctor --warmup N); in the script, run a step of each kind "
                "(training and evaluation) before timing anything",
            share=share)


# --- doctor probe face ---
from pitstop.doctor.analysis.probe import Probe, ProbeSkip  # noqa: E402


class CompiledVsEagerProbe(Probe, tip="PIT601"):
    """The compiled model against the same module run eagerly, forward + backward on the last
    training batch, on the live model (no copies, no new compile: a call that would recompile
    makes the probe skip). With the compile time the doctor saw, the steps after which
    compiling pays off (``break_even_steps``, forward+backward time only)."""

    name = "compile"

    def skip_reason(self, obs):
        if not obs.compiled:
            return "the model is not compiled"
        return None

    def run(self, ctx):
        compiled, eager = ctx.compiled_pair()
        batch = ctx.batch(whole=True)
        try:
            with ctx.no_recompile():
                result = ctx.compare(what=ctx.describe(eager, batch), baseline="eager", keep_threads=True,
                                     variants={"eager": ctx.fwd_bwd(eager, batch),
                                               "compiled": ctx.fwd_bwd(compiled, batch)})
        except ProbeSkip:
            raise
        except Exception as exc:  # torch raises its own error type when a call would recompile
            raise ProbeSkip(f"timing the compiled model would recompile it ({type(exc).__name__})") from exc
        secs = result.seconds or {}
        saved = secs.get("eager", 0.0) - secs.get("compiled", 0.0)
        c = ctx.obs.compile
        if saved > 0 and c is not None and c.compile_s:
            result.extra["break_even_steps"] = int(c.compile_s / saved) + 1
        yield self.name, result


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402
from pitstop.units import short_where  # noqa: E402


def compile_facts(records):
    """``(text, veto)`` from the trial runs' compile records (``CompileRecord``): "2 graph breaks
    (model.py:45 `if h.max().item() > 1:`), recompiled 6 times (tensor 'ids' size mismatch at
    index 1)"; ``veto`` when a function hit dynamo's recompile limit."""
    import re

    breaks, recompiles, hits = {}, {}, {}
    for rec in records:  # each run compiled afresh: the most any run saw
        for b in rec.breaks:
            breaks[(b.where, b.reason)] = b
        per_run = {}
        for r in rec.recompiles:
            per_run[r.guard] = per_run.get(r.guard, 0) + r.count
        for guard, n in per_run.items():
            recompiles[guard] = max(recompiles.get(guard, 0), n)
        for h in rec.limit_hits:
            hits[(h.function, h.where)] = h
    parts = []
    if breaks:
        first = list(breaks.values())[:2]
        said = ", ".join(f"{short_where(b.where, '?')} `{re.sub(r'[ ]+#.*$', '', b.source)}`" if b.source else
                         f"{short_where(b.where, '?')}: {b.reason}" for b in first)
        parts.append(f"{len(breaks)} graph break{'s' if len(breaks) > 1 else ''} ({said}"
                     + (", ..." if len(breaks) > 2 else "") + ")")
    if recompiles:
        n = sum(recompiles.values())
        guard = max(recompiles, key=recompiles.get)
        parts.append(f"recompiled {n} time{'s' if n > 1 else ''} ({guard})")
    veto = None
    if hits:
        h = next(iter(hits.values()))
        veto = (f"`{h.function}` ({short_where(h.where, '?')}) hit dynamo's {h.limit_name} ({h.limit}) during the trial and "
                "ran eagerly after it: compile is not kept")
        parts.append(f"hit the {h.limit_name}: eager after it")
    return ", ".join(parts), veto


class CompileKnob(Knob, tip="PIT601"):
    """``torch.compile`` of the top-level model's forward. Expensive to try (compilation
    takes tens of seconds on a small CPU), so it runs last in each round; the one-off compile
    time is reported apart from the steady-state speed, with the step count after which it
    pays off.

    Script mode replaces the model's forward by ``torch.compile(model.forward)`` right before
    its first training forward (``nn.Module.compile()`` in spirit; the instance keeps its
    class and ``state_dict`` keys). Evaluation in ``eval()`` mode recompiles once.

    Dropout: inductor draws its own random numbers, so a compiled model with dropout gets
    different masks than eager and its loss trajectory differs as much as a different seed
    would -- the loss check would reject every model with dropout (every HF config has
    some). The trial therefore runs with ``torch._inductor.config.fallback_random = True``
    (eager's random ops inside the compiled graph): the same masks as the baseline, so the
    check compares like with like (measured: over 6 SGD steps of an MLP with dropout 0.1 the
    losses deviate 0.56% from eager with inductor's own RNG, 0.00% with the flag). The fused RNG of a plain compile can only be faster than that, so the
    measured speed-up is, if anything, an underestimate.
    """

    name = "compile"
    title = "torch.compile"
    order = 90
    expensive = True

    def applies(self, ctx):
        if ctx.compiled:
            return Applicability(False, "the script already compiles its model")
        if not ctx.on_cuda:
            import shutil

            if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
                return Applicability(False, "torch.compile's CPU backend (inductor) needs a C++ compiler; none on PATH")
        return Applicability(True)

    #: modes tried beyond the default, where they can pay: on CUDA, CUDA graphs remove the
    #: per-kernel launch cost (``reduce-overhead``) and Inductor's autotuner picks among kernel
    #: candidates (``max-autotune-no-cudagraphs``). On a CPU only the default mode is tried:
    #: CPU autotuning benchmarks GEMM templates at compile time, minutes on a small machine,
    #: and there are no launches for CUDA graphs to save. Each mode is its own trial, with its
    #: compile time reported beside its speed.
    cuda_modes = ("max-autotune-no-cudagraphs", "reduce-overhead")

    def values(self, ctx):
        return ["default", *self.cuda_modes] if ctx.on_cuda else ["default"]

    def label(self, value):
        return "torch.compile" if value == "default" else f"torch.compile(mode={value!r})"

    def phases(self, value, ctx):
        return ("forward", "backward", "eval")  # the compiled model's forwards and their backwards

    def recipe_fields(self, value, ctx):
        return {"compile": value}

    def apply_in_child(self, value, **options):
        import torch

        from torch._dynamo.exc import TorchDynamoException

        from pitstop.tune.patch import KnobApplyError, on_model, wrap_forward

        mode = None if value == "default" else value
        try:  # equal dropout masks to eager (see the class docs); a private flag: absent is fine
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True
        except (ImportError, AttributeError):
            pass

        def compiled(forward):
            fn = torch.compile(forward, mode=mode)

            def compiled_forward(*args, **kwargs):
                try:
                    return fn(*args, **kwargs)
                except TorchDynamoException as exc:  # compilation failed: the knob's failure, not the script's
                    raise KnobApplyError(f"torch.compile failed: {type(exc).__name__}: {exc}") from exc
            return compiled_forward

        on_model(lambda model: wrap_forward(model, compiled), order=self.order)

    def explain(self, value, records, trial):
        """The graph breaks and recompiles dynamo reported in the trial's runs (the same facts
        as the doctor's PIT608/PIT609), and a veto when a function hit the recompile limit: it
        ran eagerly for the rest of the trial, so keeping compile would keep nothing."""
        from pitstop.tune.explanation import Explanation

        if not records:
            return None
        text, veto = compile_facts(records)
        if not text and trial.status in ("slower", "no_gain"):
            text = "one graph, no recompiles: the compiled step itself is not faster here"
        return Explanation(text=text, veto=veto) if text or veto else None

    def snippet(self, value, ctx):
        arg = "" if value == "default" else f", mode={value!r}"
        return f"""
            model = torch.compile(model{arg})   # compiles on the first steps; count graph breaks
        """


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class LaunchBoundTrace(TraceCheck, tip="PIT601"):
    looks_at = "many short kernels and the GPU idle between their launches"

    def check(self, rank, th):
        la, idle = rank.launches, rank.idle
        if la is None or idle is None or la.short_kernels < th.short_kernels or idle.launch < th.launch_idle_share:
            return
        if la.kernels_per_step < th.launch_min_kernels:
            return
        yield self.finding(
            th, rank, title="launch-bound: many short kernels", impact=idle.launch,
            evidence=(f"{la.kernels_per_step:.0f} kernels per step, {pct(la.short_kernels)} shorter than "
                      f"{la.short_threshold_us:.0f} us (median {la.median_kernel_us:.1f} us); the GPU idled "
                      f"{pct(idle.launch)} of the step while the host dispatched and launched them"),
            fix="replay the step as CUDA graphs: torch.compile(model, mode=\"reduce-overhead\") (it also fuses "
                "kernels), or torch.cuda.graphs by hand; or larger batches")
