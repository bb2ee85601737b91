"""PIT704 straggler: one rank the others steadily wait for in every collective."""

from __future__ import annotations

from pitstop.catalog import Tip


class StragglerTip(Tip):
    code = "PIT704"
    slug = "straggler"
    title = "One rank steadily slower than the others, so every collective waits for it"
    faces = "DT"
    seeds = ()
    truth = ("name the culprit rank and the phase that makes it late, and the ranks that wait (victims), "
             "step after step; a DistributedSampler problem is PIT703, not this")

    what = """
        Names a *straggler*: a rank the other ranks steadily wait for inside collectives (DDP's
        gradient all-reduce, an explicit `all_reduce` / `barrier`). Steps are matched across
        ranks by their number where the trace gives one (`ProfilerStep#N`), else by order. In
        each step a rank is *late* when the other ranks' median wait exceeds its own by more
        than a bar (the larger of an absolute floor and a share of the median step); the latest
        is the step's culprit (last to arrive). A rank late in most steps is a recurring
        straggler (this finding); a rank late in a few steps is a one-off, listed apart and not
        a finding. The finding names the culprit rank, the phase where it spends the most time
        beyond its peers and its cause (data, host, compute / GPU compute), the ranks that
        waited (the victims) and how long. The doctor measures the waits live under
        `pitstop doctor --nproc-per-node N` (several nodes: `--nnodes`); the trace face reads
        them from one profiler trace per rank, and its job view lists culprits per step.
    """
    why = """
        Every synchronous collective is a barrier: DDP's all-reduce cannot finish on any rank
        before the last rank has contributed its gradients. The step time of the whole job is
        the step time of its slowest rank; the others idle inside the collective, which a
        per-rank view shows as "communication" although the network is not the cause.
    """
    example = """
        ```python
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=0)
        for x, y in loader:                  # rank 1's shard holds the large images: slower to decode
            if rank == 0:
                log_images(x)                # extra host work on rank 0 inside the step
            loss = model(x.cuda()).loss
            loss.backward()                  # all-reduce: every rank waits for the slowest
        ```
    """
    use_instead = """
        ```python
        sampler = DistributedSampler(dataset, drop_last=True)      # equal shards
        loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True)
        for step, (x, y) in enumerate(loader):
            loss = model(x.cuda(non_blocking=True)).loss
            loss.backward()
            if rank == 0 and step % 100 == 0:                        # rare, outside the hot path
                log_images(x)
        ```
        `pitstop doctor --nproc-per-node N` (or `pitstop trace` on one trace per rank) names the
        culprit and its phase. Give every rank the same work per step: equal shards (`DistributedSampler`,
        `drop_last=True`), the same batch shapes (bucket by length across ranks), enough
        DataLoader workers that no rank's input pipeline shows, and rank-0-only work (logging,
        checkpoints, evaluation) outside the timed step or every N steps. A slower GPU or node
        shows as a GPU-compute straggler: check its clocks and neighbours.
    """
    when_not = """
        A rank late in one step (a garbage collection, a checkpoint write) is not a straggler and
        is not reported. With two ranks the victims are one rank; with uneven sequence lengths
        by design, some spread is the cost of the data, and the fix is bucketing, not a finding.
        A job whose ranks never wait for each other (independent processes) has nothing to say.
    """
    references = (
        "PyTorch docs, DistributedDataParallel (gradient all-reduce overlapped with backward): https://pytorch.org/docs/stable/notes/ddp.html",
        "PyTorch docs, torch.distributed collective functions: https://pytorch.org/docs/stable/distributed.html#collective-functions",
        "Beyond the seeds; related: PIT703 (DistributedSampler), PIT702 (no_sync)",
    )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402
from pitstop.ranks import rank_ranges  # noqa: E402


def _victims(s, world: int) -> str:
    """Who waited for straggler ``s`` and how long (median of the victims, per late step)."""
    if not s.victims:
        return "ranks that wait: none measured"
    waits = sorted(s.victim_waits)
    mid = waits[len(waits) // 2]
    return (f"ranks that wait (victims): {rank_ranges(s.victims, world)}, {mid * 1e3:.1f} ms per late step "
            f"(median), {s.waited_total:.3g} s in all")


def _title(s) -> str:
    return (f"rank {s.rank} is a straggler: the other ranks wait for its {s.phase} phase"
            + (f" ({s.cause})" if s.cause not in ("unknown", s.phase) else ""))


class StragglerCheck(Check, tip="PIT704"):
    scope = "job"
    looks_at = "ranks the others steadily waited for inside collectives, with the phase that made them late"

    def skip_reason(self, obs):
        job = obs.distributed
        if job is None or not job.merged:
            return "needs a torchrun job of 2 ranks or more (pitstop doctor --nproc-per-node N)"
        if not job.initialized:
            return "the ranks never joined a process group (independent processes)"
        if not any(r.waits for r in job.ranks):
            return "no collective wait was measured (no DDP reduction or torch.distributed collective seen)"
        return None

    def check(self, obs, th):
        job = obs.distributed
        for s in job.stragglers:
            if not s.recurring:
                continue
            share = min(1.0, s.lag / obs.mean_step) if obs.mean_step else None
            yield self.finding(
                th, title=_title(s),
                evidence=f"{s.evidence}; {_victims(s, job.world_size)} ({pct(share)} of the step).",
                fix=(f"even out rank {s.rank}'s {s.phase} work: the same amount of data per rank "
                     "(DistributedSampler), the same loading cost per batch (DataLoader workers), no extra "
                     "work on one rank inside the step (logging, checkpoints on rank 0 belong outside it)"),
                share=share, seconds=s.lag)


# --- trace face ---
from pitstop.trace.check import TraceCheck  # noqa: E402

_FIX = {"data": "more DataLoader workers / pinned memory on that rank, or the same loading cost per shard",
        "host": "no extra host work on that rank inside the step (logging, checkpoints, evaluation)",
        "GPU compute": "the same batch shapes on every rank (bucket by length), then check that GPU's clocks",
        "communication": "check that rank's links (NCCL_DEBUG=INFO, its node's network)"}


class StragglerTrace(TraceCheck, tip="PIT704"):
    looks_at = "ranks the others wait for inside collectives, steadily (pitstop.ranks), with phase and victims"

    def check_job(self, job, th):
        world = max((r.world_size for r in job.ranks), default=len(job.ranks))
        for s in job.stragglers:
            if not s.recurring:
                continue
            rank = next((r for r in job.ranks if r.rank == s.rank), None)
            step = rank.step_time.median if rank is not None and rank.step_time else None
            yield self.finding(
                th, rank, title=f"rank {s.rank} is a straggler (its {s.phase} phase: {s.cause})",
                impact=(s.lag / step) if step else None,
                evidence=f"{s.evidence}; {_victims(s, max(world, len(job.ranks)))}",
                fix=("give every rank the same work per step: " + _FIX.get(s.cause, "DistributedSampler "
                     "(drop_last=True) and the same batch shapes; then compare the slow rank's input pipeline and host")))
