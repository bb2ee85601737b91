"""PIT609 recompiles: a compiled model recompiled again and again, or silently eager past the limit."""

from __future__ import annotations

from pitstop.catalog import Tip


class Recompiles(Tip):
    code = "PIT609"
    slug = "recompiles"
    title = "Compiled model recompiled over and over, or fallen back to eager at the recompile limit"
    faces = "DK"
    seeds = ()
    truth = (
        "Beyond the seeds; extends PIT601. Dynamo guards each compiled graph on the shapes, "
        "dtypes and Python values it saw; a call that fails a guard compiles a new graph. A "
        "sequence length that changes every step under `dynamic=False` recompiles every step; "
        "once the recompile limit (`torch._dynamo.config.recompile_limit`, 8 by default) is "
        "reached, dynamo stops compiling that function and it runs eagerly for the rest of the "
        "process, with only a warning. Compile time then buys nothing. Measured here (torch 2.13 "
        "CPU, 2 shared cores, `aot_eager` backend, tests/fixtures/compile/new_length.py): 8 "
        "recompiles on \"tensor 'ids' size mismatch at index 1\", then the limit; compiling took "
        "5.3 s of the 8.7 s of observed steps (61%). Compiled by `pitstop tune` (default "
        "`dynamic=None`) the same model recompiled once and then ran with a symbolic length; "
        "`pitstop tune --only PIT609` on the `dynamic=False` script kept `dynamic=None` at 127x "
        "(4 steps after 2 warm-up, every baseline step recompiling; break-even after 10 steps)."
    )

    what = """
        Records each recompilation of a compiled function or module while the training runs:
        the guard that failed (e.g. "tensor 'x' size mismatch at index 1"), the function, how
        often, and whether the recompile limit was hit, after which the function runs eagerly.
        Compile time spent in the observed steps is counted against them, as the finding's
        share of the step time. `tune` never keeps compile when a trial hit the limit, and its
        verdict names the failing guard.
    """
    why = """
        Every recompilation runs dynamo and Inductor again: seconds to minutes on the critical
        path of training, repeated for each new shape or Python value. When the limit is hit the
        model silently returns to eager mode, so the run pays the compile time and gets none of
        the fusion.
    """
    example = """
        ```python
        model = torch.compile(model, dynamic=False)
        for ids in batches:                # each batch padded to its own longest sequence
            loss = model(ids).mean()       # new length at dim 1: recompile, every step
            loss.backward()
        ```
    """
    use_instead = """
        Pad to a few length buckets (or one fixed length), or tell dynamo which dimension varies:
        ```python
        model = torch.compile(model)            # dynamic=None: a size that changes becomes symbolic
        torch._dynamo.mark_dynamic(ids, 1)      # or mark the varying dimension explicitly
        loader = DataLoader(ds, batch_size=32, drop_last=True)   # no short last batch
        ```
        Keep Python scalars that change every step (a step counter, a learning rate) out of
        the compiled function's arguments, or pass them as tensors.
    """
    when_not = """
        A handful of recompiles at the start (one per distinct shape, e.g. training vs
        evaluation batch size) is normal and costs only their compile time. Dynamic shapes have
        a cost of their own: kernels compiled for symbolic sizes can be slower than
        specialised ones, so a few fixed buckets often beat `dynamic=True`.
    """
    references = (
        "PyTorch docs, torch.compile troubleshooting (recompilation, guards): https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
        "PyTorch docs, dynamic shapes: https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html",
        "PyTorch docs, torch.compiler.set_stance / recompile limit: https://pytorch.org/docs/stable/torch.compiler_api.html",
    )


# --- doctor face ---
import re  # noqa: E402

from pitstop.doctor.analysis.check import Check, pct, short_where  # noqa: E402

_INDEX = re.compile(r"size mismatch at index (\d+)")


def recompile_fix(guard: str) -> str:
    """The fix that fits the failing guard (also used by the compile knob's explanation)."""
    m = _INDEX.search(guard)
    name = re.search(r"tensor '([^']+)'", guard)
    arg = name.group(1) if name else "x"
    if m:
        dim = int(m.group(1))
        first = (f"`drop_last=True` on the DataLoader if only the last, short batch differs; " if dim == 0 else "")
        return (f"{first}mark the varying dimension: `torch._dynamo.mark_dynamic({arg}, {dim})` before the call, or "
                f"compile with `dynamic=None` (the default) instead of `dynamic=False`; or pad to a few length "
                f"buckets so only a handful of shapes occur")
    if "==" in guard or "___check_obj_id" in guard or "L['" in guard:
        return ("a Python value the compiled function depends on changes between calls: pass it as a tensor, "
                "or keep it out of the compiled function's arguments and closure")
    if "dtype" in guard or "requires_grad" in guard or "device" in guard:
        return "call the compiled model with the same dtype / device / requires_grad each time"
    return ('see the guard with TORCH_LOGS="recompiles" and keep what it checks constant between calls, '
            "or mark it dynamic")



class RecompileCheck(Check, tip="PIT609"):
    """A function that hit dynamo's recompile limit (it runs eagerly from then on: ``high``),
    or recompiled at least :attr:`at_least` times for one guard; the impact is the compile
    time inside the observed steps, as a share of them (measured)."""

    requires = "compiled"
    looks_at = "recompilations and recompile-limit hits of the user's compiled code"
    #: recompilations of one function for one guard before it is a finding: one or two per
    #: distinct shape (train / eval batch) are normal.
    at_least = 3

    def check(self, obs, th):
        c = obs.compile
        if c is None:
            return
        window = obs.mean_step * obs.steps_observed
        share = (c.compile_s_observed / window) if window and c.compile_s_observed else None
        in_window = (f" Compiling took {c.compile_s_observed:.1f} s of the {window:.1f} s of observed steps "
                     f"({pct(share)}); {c.compile_s:.1f} s over the whole run.") if share else \
            (f" Compiling took {c.compile_s:.1f} s over the run." if c.compile_s else "")
        hit_fns = set()
        for hit in c.limit_hits:
            hit_fns.add((hit.function, hit.where))
            n = sum(r.count for r in c.recompiles if (r.function, r.where) == (hit.function, hit.where))
            guard = hit.last_reason or next((r.example for r in c.recompiles if r.function == hit.function), "")
            yield self.finding(
                th, title=f"`{hit.function}` ({short_where(hit.where, '?')}) hit dynamo's {hit.limit_name} and runs eagerly",
                evidence=f"recompiled {n or hit.limit} times (last failing guard: {guard}); at "
                         f"torch._dynamo.config.{hit.limit_name} = {hit.limit} dynamo stops compiling it and the rest of "
                         f"the run is uncompiled: the compile time bought nothing." + in_window,
                fix=recompile_fix(guard), share=share, severity="high", where=[hit.where] if hit.where else [])
        for r in c.recompiles:
            if (r.function, r.where) in hit_fns or r.count < self.at_least:
                continue
            yield self.finding(
                th, title=f"`{r.function}` ({short_where(r.where, '?')}) recompiled {r.count} times",
                evidence=f"failing guard: {r.guard} (e.g. {r.example}); each recompilation runs dynamo and the "
                         f"backend again." + in_window,
                fix=recompile_fix(r.guard), share=share, severity=None if share else "medium",
                where=[r.where] if r.where else [])


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class DynamicShapesKnob(Knob, tip="PIT609"):
    """For a script that compiles with ``dynamic=False`` and recompiled in the survey: the
    same compile with ``dynamic=None`` (torch's default), where a size that changed once is
    compiled symbolically instead of once per value. Script mode patches ``torch.compile`` and
    ``nn.Module.compile`` in the child to drop ``dynamic=False``; the Recipe's ``compile`` mode
    compiles with ``dynamic=None`` already."""

    name = "dynamic"
    title = "torch.compile with dynamic=None"
    order = 91
    expensive = True
    #: recompilations in the survey before it is worth a trial (one per distinct shape is normal)
    at_least = 2

    def applies(self, ctx):
        if not ctx.compiled:
            return Applicability(False, "the script does not compile its model (PIT601 tries compiling it)")
        if not ctx.static_shapes:
            return Applicability(False, "the script's torch.compile does not pass dynamic=False: changing sizes "
                                        "already become symbolic after one recompile")
        if ctx.recompiles < self.at_least and not ctx.recompile_limit_hit:
            return Applicability(False, f"{ctx.recompiles} recompiles in the survey: nothing to save")
        return Applicability(True)

    def values(self, ctx):
        return ["dynamic=None"]

    def label(self, value):
        return "torch.compile(dynamic=None)"

    def phases(self, value, ctx):
        return ("forward", "backward", "eval")

    def recipe_fields(self, value, ctx):
        return {"compile": "default"}  # the engine's torch.compile uses dynamic=None

    def apply_in_child(self, value, **options):
        import torch

        compile_, module_compile = torch.compile, torch.nn.Module.compile

        def dynamic_compile(*args, **kwargs):
            if kwargs.get("dynamic") is False:
                kwargs["dynamic"] = None
            return compile_(*args, **kwargs)

        def dynamic_module_compile(module, *args, **kwargs):
            if kwargs.get("dynamic") is False:
                kwargs["dynamic"] = None
            return module_compile(module, *args, **kwargs)

        torch.compile = dynamic_compile
        torch.nn.Module.compile = dynamic_module_compile

    def explain(self, value, records, trial):
        from pitstop.tips.pit601_compile import compile_facts
        from pitstop.tune.explanation import Explanation

        if not records:
            return None
        text, veto = compile_facts(records)
        return Explanation(text=text or "no recompiles left", veto=veto)

    def snippet(self, value, ctx):
        return """
            model = torch.compile(model)   # dynamic=None (the default): a size that changes becomes symbolic
            # or keep dynamic=False and mark the varying dimension: torch._dynamo.mark_dynamic(ids, 1)
        """
