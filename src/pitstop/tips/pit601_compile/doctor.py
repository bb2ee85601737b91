"""PIT601's doctor faces: the compile check and the compiled-vs-eager probe."""

from __future__ import annotations

from pitstop.doctor.analysis.check import Check
from pitstop.doctor.analysis.probe import Probe, ProbeSkip

__all__ = ["CompileCheck", "CompiledVsEagerProbe"]


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
