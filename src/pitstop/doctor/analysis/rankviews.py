"""One rank's numbers in the shared per-rank model (:mod:`pitstop.ranks`), torch-free.

Used by the single-process report (one rank) and by the merge of a torchrun job
(``doctor/analysis/job.py``). The breakdown gains a ``collective`` phase: the seconds a rank waited
inside collectives, taken out of the phase they were spent in (DDP's gradient reduction out
of ``backward``, FSDP's all-gathers and reduce-scatters out of ``forward`` / ``backward``,
explicit ``torch.distributed`` calls out of ``other``; a phase never goes below zero).
"""

from __future__ import annotations

from pitstop.doctor.analysis.dist_records import RankDist
from pitstop.doctor.analysis.observations import PHASES, Observations
from pitstop.ranks import RankView, StepStats

__all__ = ["split_breakdown", "samples_per_s", "rank_view", "SOURCE"]

#: what the doctor's rank views are measured with
SOURCE = "pitstop doctor"


def split_breakdown(obs: Observations, dist: RankDist | None) -> dict[str, float]:
    """Mean seconds per step for each phase, with ``collective`` split off."""
    if obs.breakdown is None:
        return {}
    out = {ph: obs.seconds(ph) for ph in PHASES}
    if dist is None:
        return out
    reduction = dist.mean("reduction_waits")
    shard = dist.shard
    fwd, bwd = (shard.mean("forward_wait"), shard.mean("backward_wait")) if shard is not None else (0.0, 0.0)
    explicit = max(0.0, dist.mean("waits") - reduction - fwd - bwd)
    taken = 0.0
    for phase, wait in (("backward", reduction + bwd), ("forward", fwd), ("other", explicit)):
        part = min(wait, out.get(phase, 0.0))
        out[phase] = out.get(phase, 0.0) - part
        taken += part
    out["collective"] = taken
    return out


def samples_per_s(obs: Observations) -> float | None:
    """Training samples per second over the observed steps (None: unknown)."""
    sps = 1.0 / obs.mean_step if obs.mean_step else None
    b = obs.batch
    samples = (b.samples_per_step if b else None) or obs.batch_size
    return sps * samples if sps and samples else None


def rank_view(obs: Observations, *, rank: int = 0, world_size: int = 1, dist: RankDist | None = None) -> RankView:
    st = obs.step_time
    stats = StepStats(median=st.median, p90=st.p90, steps=obs.steps_observed) if st is not None else None
    return RankView(rank=rank, world_size=world_size, step_time=stats, breakdown=split_breakdown(obs, dist),
                    samples_per_s=samples_per_s(obs), device=obs.device, source=SOURCE,
                    waits=dist.waits if dist is not None else ())
