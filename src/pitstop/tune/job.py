"""Script mode for torchrun jobs: ``pitstop tune --nproc-per-node N SCRIPT`` (torch-free).

Every run (the survey, each trial's, each baseline's) is a whole job launched by the doctor's
torchrun launcher (:func:`pitstop.doctor.run.torchrun.run_job`): ``N`` ranks under
``torch.distributed.run``, each rank the doctor's child with the trial's knobs applied before
the script, stopped after ``warmup + steps`` optimizer steps; nothing is left running after it
(the launcher kills the agent's group and every rank's group, DataLoader workers included).

One job becomes one :class:`pitstop.tune.run.Run` (:func:`run_from_job`):

- **the step time is the slowest rank's**: step ``i`` of the job takes the longest of the
  ranks' step ``i`` (with that rank's CPU, run-queue and CUDA-event clocks): a trick that speeds
  up one rank only does not speed up the job;
- **the loss is checked on every rank**: the run keeps every rank's trajectory
  (``rank_losses``) and the session checks each rank's against the baseline's same rank
  (:meth:`pitstop.tune.session.TuneSession` ``_loss_check``), rank 0's shown;
- **every rank's median step and peak memory** are kept beside (``rank_step_times``,
  ``rank_peaks``): sharding (PIT706) changes what each rank holds;
- a rank that failed fails the run, named (``rank 1: ...``); the survey's context is the slowest
  rank's observations (a straggler's DataLoader waits are the job's).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pitstop.tune.context import context_from_observations
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.options import TuneError
from pitstop.tune.run import Run
from pitstop.tune.script import ScriptBackend, run_from_result

__all__ = ["JobBackend", "run_from_job"]


def run_from_job(job: Any, steps: int) -> Run:
    """One :class:`Run` of a whole job (:class:`pitstop.doctor.run.torchrun.JobResult`): see the
    module docs."""
    ranks = [run_from_result(r, steps) for r in job.results]
    if not ranks:
        return Run(status="crashed", message=job.message or "the job started no rank", elapsed=job.elapsed)
    for k, r in enumerate(ranks):
        if not r.ok:
            r.message = f"rank {k}: {r.message}"
            r.elapsed = job.elapsed
            return r
    n = min(len(r.step_times) for r in ranks)
    slowest = [max(range(len(ranks)), key=lambda k: ranks[k].step_times[i]) for i in range(n)]

    def col(name: str) -> list:
        out = []
        for i, k in enumerate(slowest):
            xs = getattr(ranks[k], name)
            out.append(xs[i] if len(xs) == len(ranks[k].step_times) else None)
        return out

    w = min(len(r.warmup_times) for r in ranks)
    first = ranks[0]
    run = Run(status="ok", step_times=[ranks[k].step_times[i] for i, k in enumerate(slowest)],
              warmup_times=[max(r.warmup_times[i] for r in ranks) for i in range(w)], losses=list(first.losses),
              peak_memory=max((r.peak_memory for r in ranks if r.peak_memory is not None), default=None),
              batch_size=first.batch_size, elapsed=job.elapsed, message=first.message,
              cpu_times=col("cpu_times"), run_delays=col("run_delays"), actives=col("actives"),
              gpu_times=col("gpu_times"))
    run.warmup_s = sum(run.warmup_times)
    run.rank_losses = [list(r.losses) for r in ranks]
    run.rank_step_times = [r.median_step for r in ranks]  # each rank's step time and peak memory, side by side
    run.rank_peaks = [r.peak_memory for r in ranks]
    run.compile = first.compile
    return run


class JobBackend(ScriptBackend):
    """:class:`ScriptBackend` whose every run is a torchrun job of ``nproc_per_node`` ranks."""

    def __init__(self, *args: Any, nproc_per_node: int, **kwargs: Any) -> None:
        if nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be >= 1, got {nproc_per_node}")
        kwargs["warm"] = False  # a job is launched by torchrun, never forked from a warm worker
        super().__init__(*args, **kwargs)
        self.nproc_per_node = nproc_per_node
        self.worker_kind = f"a torchrun job of {nproc_per_node} ranks per run"
        self.target += f" (torchrun, {nproc_per_node} ranks)"

    def _job(self, **fields: Any) -> Any:
        from pitstop.doctor.run import spec
        from pitstop.doctor.run.torchrun import run_job

        rs = spec.RunSpec(**self._spec, nproc_per_node=self.nproc_per_node, stdout="devnull", probes=False,
                          **fields)
        return run_job(rs, check=False)

    def context(self) -> Context:
        job = self._job(steps=self.survey_steps, warmup=1, timeout=self.timeout, mode="full",
                        setups=self._base_setups())
        # the slowest rank's observations: its phase shares bound what a trick can give the job
        # (a straggler's DataLoader waits are the job's); rank 0 when no rank has steps
        first = max(job.results, key=lambda r: sum(s.wall for s in r.steps if s.kind == "observed"), default=None)
        self.survey = first
        if first is None or first.status not in ("stopped", "finished", "exited") or not first.observations:
            status = first.status if first is not None else job.status
            message = first.message if first is not None else job.message
            raise TuneError(f"the job could not be surveyed ({status}): {message}"
                            + (f"\n{first.traceback}" if first is not None and first.traceback else ""))
        if not first.observed:
            raise TuneError(f"the script ran no optimizer step ({first.message}): nothing to tune")
        self.ctx = context_from_observations(first.observations)
        # under DDP every rank's step lasts as long (they wait for each other inside backward), so
        # "the slowest rank" is a coin toss between the straggler and its victims; each phase's
        # largest share over the ranks bounds what a trick on that phase can give the job
        shares = [r.observations.breakdown.shares() for r in job.results
                  if r.observations is not None and r.observations.breakdown is not None]
        if len(shares) > 1:
            phases = dict.fromkeys(k for one in shares for k in one)
            self.ctx = replace(self.ctx, phase_shares=tuple((k, max(one.get(k, 0.0) for one in shares))
                                                            for k in phases))
        return self.ctx

    def run(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, round: int = 0, timeout: float = 300.0,
            steps: int = 10, warmup: int = 3) -> Run:
        started = time.perf_counter()
        job = self._job(steps=steps, warmup=warmup, timeout=timeout, setups=self.setups(settings, knobs), mode="light")
        run = run_from_job(job, steps)
        run.elapsed = time.perf_counter() - started
        run.setup_s = max(0.0, run.elapsed - (run.warmup_s or 0.0) - sum(run.step_times))
        if run.batch_size is None and self.ctx is not None:
            run.batch_size = self.ctx.batch_size
        run.round = round
        return run
