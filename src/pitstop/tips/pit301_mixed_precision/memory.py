"""PIT301 mixed-precision, memory fix face: what bf16 autocast saves of this model's activations."""

from __future__ import annotations

# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix
from pitstop.doctor.analysis.oom_records import OUTSIDE
from pitstop.doctor.analysis.probe import probe_gain
from pitstop.units import mib, pct

__all__ = ["Bf16ActivationsFix"]


class Bf16ActivationsFix(MemoryFix, tip="PIT301"):
    """Under bf16 autocast what the model's layers make is mostly 16-bit: the tensors they save
    for backward, their outputs, the gradients their backward makes. The per-sample bytes one
    forward saves under autocast (measured on 2 and 4 samples of the last batch) against fp32
    give the share saved of each moment's activations and temporaries made inside the model's
    modules; what the loss and the script make (outside the modules, in fp32) is left as it
    is, and the 16-bit weight copies autocast keeps for the backward are added."""

    title = "bf16 autocast of the forward"

    def estimate(self, basis, obs, *, limit, need, oom):
        p = obs.memory_profile
        if p is None or basis.source != "profile" or "bfloat16" not in p.precision_saved or obs.autocast_dtype:
            return
        ratio = p.precision_saved["bfloat16"]
        extra = p.precision_fixed.get("bfloat16", 0)
        saved = [(1 - ratio) * _inside(m) for m in basis.moments]
        if max(saved, default=0) <= 0:
            return
        from pitstop.tips.pit301_mixed_precision import PrecisionProbe

        g = probe_gain(obs.probe(PrecisionProbe.key()))
        cost, why = None, "the bf16 probe did not run (--no-probes), so its effect on time is unknown"
        if g is not None and g.ratio > 0:
            cost = obs.compute_share * (1 / g.ratio - 1)
            why = (f"forward+backward measured {g.ratio:.2f}x as fast under bf16 (probe), on {pct(obs.compute_share)} "
                   "of the step")
        top = basis.top
        yield FixEstimate(
            code=self.tip, title="bf16 autocast of the forward (the model's tensors in 16 bits)",
            moment_saved=saved, fixed_saved=-extra, how="measured",
            basis=(f"one forward saves {ratio:.2f}x the bytes per sample under bf16 autocast (measured on 2 and 4 "
                   f"samples of the last batch), applied to the {mib(_inside(top))} the model's modules held at the "
                   f"peak; autocast keeps {mib(extra)} of 16-bit weight copies whatever the batch"),
            time_cost=cost, cost_basis=why,
            fix="with torch.autocast(device_type, dtype=torch.bfloat16): around the forward, the loss in fp32",
            caveat="reduced precision: compare the loss curves (pitstop tune checks them)")


def _inside(m) -> float:
    """A moment's activations and temporaries made inside the model's modules (in the optimizer
    step the temporaries are the optimizer's)."""
    acts = m.activations - sum(x.bytes for x in m.by_module if x.module == OUTSIDE)
    temps = 0 if m.phase == "optimizer" else m.temporaries - m.temporaries_outside
    return max(0, acts) + max(0, temps)
