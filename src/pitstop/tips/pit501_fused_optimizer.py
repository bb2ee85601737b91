"""PIT501 fused-optimizer: update all parameters in one fused kernel, not one tensor at a time."""

from __future__ import annotations

from pitstop.catalog import Tip


class FusedOptimizer(Tip):
    code = "PIT501"
    slug = "fused-optimizer"
    title = "Optimizer in for-loop mode, or not fused where fused=True exists"
    faces = "LDKEB"
    seeds = ("000",)
    truth = (
        "Seed 000 explains `foreach` well, but two details are off today. `foreach` kernels are "
        "batched elementwise updates over many tensors, not BLAS/cuBLAS linear algebra. And the "
        "faster choice is now `fused=True` (Adam, AdamW, SGD, Adagrad; CPU and CUDA), which "
        "PyTorch never picks by default: it defaults to `foreach` only when all parameters are "
        "on an accelerator such as CUDA, so on CPU the default *is* the for-loop. An AdamW step "
        "over 200 parameter tensors (100 Linear(256, 256), 6.6M params) measured 2.4x faster "
        "fused than for-loop here (22.9 ms -> 9.5 ms; one thread, CPU time, 2-core Xeon); "
        "2.4x-4.6x over the sizes tried with one thread, 2.7x-5.6x with two (wall clock, "
        "noisier: the machine was shared). `foreach=True` was no faster than the for-loop on "
        "CPU (0.7x-1.3x). The seed's \"slight numerical differences\" is right: after 20 steps, "
        "fused and for-loop AdamW weights differed by at most 7.5e-9."
    )

    what = """
        Flags a `torch.optim.*` constructor called with a literal `foreach=False` or
        `fused=False`, reported at that keyword; no fix is offered (the choice can be deliberate,
        e.g. to reproduce an old run bit for bit). At run time the doctor checks which
        implementation each optimizer actually runs (for-loop, foreach or fused) and what share of
        the step time `optimizer.step()` takes; `tune` measures `fused=True` on your own training.
    """
    why = """
        The for-loop implementation updates one parameter tensor at a time: for AdamW that is
        several elementwise ops per tensor (decay, two moment updates, the denominator, the
        update), each a separate pass over memory (and on a GPU a separate kernel launch), plus
        Python overhead per tensor. `foreach` groups each op across all tensors into one
        multi-tensor call (horizontal fusion). `fused` also merges the ops (vertical fusion): one
        kernel reads each parameter, its gradient and its two moments once and writes them once.
        Models with hundreds of parameter tensors spend a visible share of the step there.
    """
    example = """
        ```python
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
        # on CPU the default (no foreach/fused argument) is the same for-loop
        ```
    """
    use_instead = """
        ```python
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
        ```
        `fused=True` exists for `Adam`, `AdamW`, `SGD` and `Adagrad` with floating-point
        parameters on CPU and CUDA. For the other optimizers (`RMSprop`, the seed's example, has
        `foreach` but no `fused`) leave `foreach` unset: PyTorch uses it on CUDA by itself.
        `fused=True` and `foreach=True` cannot be combined.
    """
    when_not = """
        When the optimizer step is a small share of the training step (a compute-heavy model
        with few, large parameter tensors), a 3x faster optimizer step moves the total little.
        On CPU `foreach=True` buys nothing (0.7x-1.3x of the for-loop
        here). `foreach` needs about one extra copy of the parameters in peak memory for its
        intermediates (PyTorch docs). Fused results differ from the for-loop in the last bits,
        so a bitwise comparison with a run made with the old implementation needs the old
        implementation; `fused` does not support `differentiable=True`. On CPU, parameters
        converted to channels_last lose the gain: an SGD(momentum=0.9) step over the bundled
        conv net took 2.4x-2.7x as long fused on channels_last parameters as fused on
        contiguous ones (about 0.28 vs 0.11 ms, one thread) and 1.06x-1.09x as long as the
        for-loop (`benchmarks/fused_channels_last.py`, 6 runs on a shared 2-core machine).
    """
    references = (
        "PyTorch docs, torch.optim — Algorithms (for-loop, foreach and fused implementations): https://pytorch.org/docs/stable/optim.html#algorithms",
        "PyTorch docs, torch.optim.AdamW (`foreach` and `fused` arguments): https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
        "Seed 000 (Torch Optimizer Tricks: RMSProp `foreach`, \"slight numerical differences\")",
    )
    engine = "Recipe.optimizer_impl ('fused', 'foreach', 'for-loop') rebuilds the optimizer with that implementation from its param groups and defaults and carries its state over (pitstop.engine.switch_optimizer_impl)."


# --- lint face ---
from pitstop.lint.rule import LintRule, cst, nodes
from pitstop.optim_impl import FOR_LOOP_BY_DEFAULT, IMPLEMENTATION_KWARGS, UNKNOWN, implementation


def _literal(arg):
    if arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
        return None
    return True if nodes.is_true(arg.value) else False if nodes.is_false(arg.value) else UNKNOWN


def pit501_message(cls: str, key: str, foreach, fused) -> str:
    """The finding for a literal ``key=False`` in ``torch.optim.<cls>(...)``; ``foreach`` and
    ``fused`` as for :func:`implementation`."""
    takes = IMPLEMENTATION_KWARGS.get(cls)
    if takes is None:
        return (f"{cls}({key}=False) forces a non-default implementation of the optimizer step (for torch.optim's "
                f"optimizers, the per-parameter for-loop); drop it unless that is deliberate")
    if key not in takes:
        return f"{cls} takes no {key}= argument: this call raises TypeError; drop {key}=False"
    other = "fused" if key == "foreach" else "foreach"
    given = {"foreach": foreach, "fused": fused}
    if other not in takes:  # that keyword is reported on its own (TypeError)
        given[other] = None
    runs = implementation(cls, **given)
    if runs == "fused":
        return f"{cls}(foreach=False) has no effect next to fused=True (the fused implementation runs); drop it"
    if runs == "foreach":
        return (f"{cls}(fused=False, foreach=True) runs the foreach implementation, not the fused one; "
                f"fused=True (without foreach) merges each update's ops into one kernel")
    if runs is None:
        return (f"{cls}({key}=False) opts out of {key} (the per-parameter for-loop runs unless {other}=True); "
                f"drop it" + (" or pass fused=True" if "fused" in takes else ""))
    both = given[other] is False
    if cls in FOR_LOOP_BY_DEFAULT:
        return (f"{cls}({key}=False) runs the per-parameter for-loop, which is also {cls}'s default (it spares "
                f"the memory foreach needs); on CUDA foreach=True is faster if that memory is there")
    if key == "foreach":
        drop = "drop foreach=False and fused=False" if both else "drop it"
        if "fused" in takes:
            return (f"{cls}(foreach=False) runs the per-parameter for-loop; {drop} (PyTorch then picks foreach "
                    f"on CUDA by itself) or pass fused=True")
        return (f"{cls}(foreach=False) runs the per-parameter for-loop; {drop}: PyTorch then picks foreach "
                f"on CUDA by itself ({cls} has no fused=)")
    if both:
        return f"{cls}(fused=False, foreach=False) runs the per-parameter for-loop; pass fused=True instead"
    return (f"{cls}(fused=False) runs the per-parameter for-loop: an explicit fused=False also stops PyTorch "
            f"from picking foreach, on CUDA too; pass fused=True, or drop it")


class ForLoopOptimizerRule(LintRule, tip="PIT501"):
    runs = "step"  # paid every step wherever the reported line is
    message = "optimizer forced off its multi-tensor implementations by foreach=False/fused=False"
    in_tests = False

    def visit_Call(self, node):
        q = self.ctx.optimizer_class(node)
        if q is None:
            return
        cls = q.rsplit(".", 1)[1]
        args = {key: nodes.kwarg(node, key) for key in ("foreach", "fused")}
        values = {key: _literal(a) for key, a in args.items()}
        for key, a in args.items():
            if a is not None and nodes.is_false(a.value):
                self.report(a, pit501_message(cls, key, **values))


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402


class FusedOptimizerBench(Benchmark, tip="PIT501"):
    title = "Optimizer step over many parameter tensors: for-loop vs foreach vs fused"
    claim = Claim(
        seed="000",
        text="`foreach` option updates weights in a vectorized, batched manner ... This is more efficient than "
             "python `for loops` (RMSProp)",
        baseline="RMSprop for-loop",
        candidate="RMSprop foreach",
        ratio_of="median time of one RMSprop step, for-loop / foreach",
        scope="any",  # the seed's sentence names both BLAS and cuBLAS: a claim for CPUs and GPUs alike
    )

    def run(self, ctx):
        import torch

        layers, width = ctx.size(tiny=(10, 64), quick=(50, 128), full=(100, 256))
        torch.manual_seed(0)
        shapes = [s for _ in range(layers) for s in ((width, width), (width,))]
        init = [torch.randn(s, device=ctx.device) * 0.02 for s in shapes]
        grads = [torch.randn(s, device=ctx.device) * 1e-3 for s in shapes]

        def make(kind, **kw):
            params = [torch.nn.Parameter(t.clone()) for t in init]
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt = {"RMSprop": torch.optim.RMSprop, "AdamW": torch.optim.AdamW}[kind](params, lr=1e-4, **kw)
            opt.step()  # create the state outside the timing
            return opt.step

        variants = {
            "RMSprop for-loop": make("RMSprop", foreach=False),
            "RMSprop foreach": make("RMSprop", foreach=True),
            "AdamW for-loop": make("AdamW", foreach=False),
            "AdamW foreach": make("AdamW", foreach=True),
            "AdamW fused": make("AdamW", fused=True),
        }
        measured = ctx.time(variants)
        n = sum(t.numel() for t in init)
        return Outcome(
            workload=f"{len(shapes)} parameter tensors ({layers} x Linear({width}, {width}) weights and biases, "
                     f"{n:,} fp32 values) on {ctx.device}; one optimizer.step() per call, gradients fixed",
            measurements=measured,
            comparisons=[Comparison("AdamW for-loop", "AdamW foreach", "AdamW for-loop vs foreach"),
                         Comparison("AdamW for-loop", "AdamW fused", "AdamW for-loop vs fused"),
                         Comparison("AdamW foreach", "AdamW fused", "AdamW foreach vs fused")],
            notes=["PyTorch picks foreach by default only when every parameter is on an accelerator; on CPU the "
                   "default is the for-loop. fused=True exists for Adam, AdamW, SGD and Adagrad, not RMSprop."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402


class FusedOptimizerCheck(Check, tip="PIT501"):
    looks_at = "optimizer implementation (for-loop/foreach/fused), with a probe of each mode"
    #: the HF Trainer builds the optimizer from TrainingArguments.optim (AdamW only);
    #: Lightning builds it in the user's configure_optimizers()
    framework_fixes = {"lightning": "construct it so in configure_optimizers(), e.g. "
                                    "torch.optim.AdamW(self.parameters(), ..., fused=True)"}

    def framework_fix(self, framework, finding, obs):
        if framework == "transformers":
            cls = obs.optimizer.cls if obs.optimizer else ""
            return 'TrainingArguments(optim="adamw_torch_fused")' if cls == "AdamW" else None
        return super().framework_fix(framework, finding, obs)

    def check(self, obs, th):
        opt_share = obs.share("optimizer")
        for i, o in enumerate(obs.optimizers):
            probe = obs.probe(OptimizerModeProbe.key(i))
            g = probe_gain(probe)
            if g is None or probe.baseline != o.mode or g.low < th.probe_speedup:
                continue
            best, seconds = g.candidate, probe.seconds or {}
            # conservative: the interval's lower bound, on the optimizer's share only
            share = opt_share * (1 - 1 / g.low) if i == 0 else None
            fix = f"torch.optim.{o.cls}(..., fused=True)" if best == "fused" else \
                f"torch.optim.{o.cls}(..., foreach=True)"
            # the other modes are other fixes for the same optimizer time: named with their gain, never added
            others = [(c, og) for c in sorted(probe.speedups or {}) if c != best
                      and (og := probe_gain(probe, c)) is not None and og.low >= th.probe_speedup]
            options = "".join(f"; or {c} mode: {og.text()}, about {pct(opt_share * (1 - 1 / og.low))} of the step"
                              for c, og in others if i == 0)
            if others:
                fix += "".join(f" (or {c}=True)" for c, _ in others)
            yield self.finding(
                th, title=f"{o.cls} runs in {o.mode} mode; {best} measured faster here",
                evidence=f"probe: {probe.what}: {o.mode} {seconds[o.mode] * 1e3:.2f} ms, {best} "
                         f"{seconds[best] * 1e3:.2f} ms (median; {gain_text(g)}); optimizer.step() is "
                         f"{pct(opt_share)} of the step{options}"
                         + ("; one change for the same optimizer time: the gains do not add, the best is counted"
                            if others else "") + f"; {ESTIMATE_NOTE}.",
                fix=fix, share=share, seconds=share * obs.mean_step if share is not None else None)


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class OptimizerImplKnob(Knob, tip="PIT501"):
    """The optimizer's implementation: ``fused`` (where the class has it) and ``foreach``.

    Script mode patches the constructors of the ``torch.optim`` classes that accept the flag,
    so the script's own ``torch.optim.X(..., foreach=False)`` builds the other implementation.
    """

    name = "optimizer"
    title = "fused / foreach optimizer"
    order = 30

    def applies(self, ctx):
        if ctx.optimizer is None:
            return Applicability(False, "no optimizer step was seen")
        if not self.values(ctx):
            return Applicability(False, f"{ctx.optimizer} already runs {ctx.optimizer_mode}")
        return Applicability(True)

    def values(self, ctx):
        out = ["fused"] if ctx.fused_available else []
        out.append("foreach")
        return [v for v in out if v != ctx.optimizer_mode and ctx.optimizer_mode != "fused"]

    def label(self, value):
        return f"{value} optimizer"

    def phases(self, value, ctx):
        return ("optimizer",)  # only optimizer.step() changes

    def recipe_fields(self, value, ctx):
        return {"optimizer_impl": value}

    def apply_in_child(self, value, **options):
        import inspect

        import torch

        from pitstop.tune.patch import patch_init

        flag = "fused" if value == "fused" else "foreach"

        def change(args):
            args[flag] = True
            other = "foreach" if flag == "fused" else "fused"
            if args.get(other):
                args[other] = None

        for obj in vars(torch.optim).values():
            if isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer) and obj is not torch.optim.Optimizer \
                    and flag in inspect.signature(obj.__init__).parameters and "__init__" in vars(obj):
                patch_init(obj, change)

    def snippet(self, value, ctx):
        opt = ctx.optimizer or "AdamW"
        return f"""
            optimizer = torch.optim.{opt}(model.parameters(), ..., {value}=True)
        """


# --- doctor probe face ---
from pitstop.doctor.analysis.probe import ESTIMATE_NOTE, Probe, ProbeSkip, gain_text, probe_gain  # noqa: E402
from pitstop.doctor.analysis.probe_records import ProbeResult  # noqa: E402


class OptimizerModeProbe(Probe, tip="PIT501"):
    """One ``step()`` of each optimizer's class in its current mode vs the other modes
    (for-loop, foreach, fused) it accepts, same hyper-parameters, on zero tensors shaped
    like its trainable parameters with fixed small gradients. Keys: ``optimizer``,
    ``optimizer1``, ... in the order of ``obs.optimizers``."""

    name = "optimizer"

    def skip_reason(self, obs):
        if not obs.optimizers:
            return "no optimizer stepped"
        return None

    def run(self, ctx):
        for i, (opt, info) in enumerate(zip(ctx.optimizers, ctx.obs.optimizers)):
            key = self.key(i)
            if info.mode == "fused":
                yield key, ProbeResult.skip(f"{info.cls} already runs fused")
                continue
            try:
                yield key, self._probe(ctx, opt, info.mode)
            except ProbeSkip as exc:
                yield key, ProbeResult.skip(str(exc))

    @staticmethod
    def _probe(ctx, optimizer, current):
        import inspect

        import torch

        cls = type(optimizer)
        params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        if not params:
            raise ProbeSkip("the optimizer holds no trainable parameters")
        if sum(p.numel() * p.element_size() for p in params) > ctx.max_bytes:
            raise ProbeSkip("parameters too large to copy for a probe")
        device = params[0].device.type
        accepted = inspect.signature(cls.__init__).parameters
        modes = ["for-loop"] + [m for m in ("foreach", "fused") if m in accepted]
        defaults = {k: v for k, v in optimizer.defaults.items()
                    if k in accepted and k not in ("foreach", "fused", "differentiable", "capturable")}
        variants = {}
        for mode in modes:
            clones = [torch.zeros_like(p, requires_grad=True) for p in params]
            for c in clones:
                c.grad = torch.randn_like(c) * 1e-3
            kw = dict(defaults)
            if mode == "fused":
                kw["fused"] = True
            else:
                kw["foreach"] = mode == "foreach"
            try:
                opt = cls(clones, **kw)
                opt.step()  # creates the (lazy) state; checks the mode is supported here
            except Exception as exc:  # e.g. fused not implemented for this device/dtype
                if mode == current:
                    raise ProbeSkip(f"could not rebuild {cls.__name__} in {mode} mode: {exc}") from exc
                continue
            variants[mode] = opt.step
        if len(variants) < 2:
            raise ProbeSkip(f"{cls.__name__} offers no other mode than {current} here")
        what = (f"{cls.__name__}.step() over {len(params)} parameter tensors "
                f"({sum(p.numel() for p in params):,} elements) on {device}")
        return ctx.compare(what=what, baseline=current, variants=variants)


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class ForLoopOptimizerTrace(TraceCheck, tip="PIT501"):
    looks_at = "kernels launched inside optimizer.step() annotations, and whether they are multi-tensor/fused"

    def check(self, rank, th):
        o = rank.optimizer
        if o is None or o.multi_tensor or o.kernels_per_step < th.optimizer_kernels:
            return
        yield self.finding(
            th, rank, title="the optimizer launches kernels per parameter", impact=o.share,
            evidence=(f"optimizer.step() launches {o.kernels_per_step:.0f} kernels per step, none multi-tensor or "
                      f"fused; their GPU time is {pct(o.share)} of the step (the launches cost host time too)"),
            fix="construct the optimizer with fused=True (or foreach=True)")
