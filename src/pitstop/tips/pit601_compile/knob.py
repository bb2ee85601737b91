"""PIT601's knob face: torch.compile tried on the user's training by ``pitstop tune``."""

from __future__ import annotations

from pitstop.tune.knob import Applicability, Knob
from pitstop.units import short_where

__all__ = ["CompileKnob", "compile_facts"]


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
