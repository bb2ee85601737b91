"""From a torchrun job's per-rank results to one :class:`Diagnosis` (torch-free).

- each rank is diagnosed alone with the rank checks (``Check.scope == "rank"``); a finding
  that holds on several ranks is reported once, naming its ranks (grouped by code and
  source location; the lowest rank's numbers are shown);
- the ranks' :class:`~pitstop.doctor.analysis.dist_records.RankDist` are merged into one
  :class:`~pitstop.doctor.analysis.dist_records.JobRecord` (per-rank breakdowns with the
  ``collective`` phase, stragglers and one-offs by :func:`pitstop.ranks.analyze_stragglers`) held by the
  merged observations, on which the job checks (PIT702, PIT703, stragglers) run once;
- the job's status: a rank that failed first (its traceback is the report's), a timeout
  (with the ranks that were waiting inside a collective), an interruption, or stopped.
"""

from __future__ import annotations

import dataclasses

from pitstop.doctor.analysis.check import Finding, Thresholds
from pitstop.doctor.analysis.diagnosis import Diagnosis, diagnose
from pitstop.doctor.analysis.dist_records import JobRecord, RankDist
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.rankviews import rank_view, split_breakdown
from pitstop.doctor.run.spec import RunResult
from pitstop.doctor.run.torchrun import JobResult
from pitstop.ranks import StraggleAnalysis, analyze_stragglers
from pitstop.severity import settle

__all__ = ["diagnose_job", "merge_ranks", "merge_findings", "INDEPENDENT_NOTE"]

INDEPENDENT_NOTE = ("the script never called torch.distributed.init_process_group: its {n} processes trained "
                    "independently (no gradient is shared); each was diagnosed alone")
_FAILED = ("error", "setup_error", "crashed")
#: words of a traceback raised because another rank went away (not the root cause)
_PEER_WORDS = ("connection closed", "connection reset", "gloo", "nccl", "broken pipe", "interrupted")


def _dist(result: RunResult) -> RankDist | None:
    obs = result.observations
    if obs is None or obs.distributed is None or not obs.distributed.ranks:
        return None
    return obs.distributed.ranks[0]


def merge_ranks(results: list[RunResult], th: Thresholds) -> JobRecord:
    """The ranks' distributed records side by side, with the stragglers among them."""
    dists, views, breakdowns, means = [], [], [], []
    world = len(results)
    for i, r in enumerate(results):
        d = _dist(r) or RankDist(rank=i, world_size=world)
        world = max(world, d.world_size)
        dists.append(d)
        obs = r.observations or Observations()
        views.append(rank_view(obs, rank=d.rank, world_size=d.world_size, dist=d))
        breakdowns.append(split_breakdown(obs, d))
        means.append(obs.mean_step)
    found = analyze_stragglers(views, min_lag=th.straggler_lag, rel_lag=th.straggler_rel,
                               min_fraction=th.straggler_steps) if any(d.initialized for d in dists) else StraggleAnalysis()
    return JobRecord(world_size=world, ranks=tuple(dists), stragglers=found.stragglers, one_offs=found.one_offs,
                     breakdowns=tuple(breakdowns), step_means=tuple(means))


def _rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def merge_findings(per_rank: list[tuple[int, list[Finding]]], world_size: int) -> list[Finding]:
    """One finding per (code, where) across ranks, naming the ranks it holds for."""
    groups: dict[tuple, list[tuple[int, Finding]]] = {}
    for rank, findings in per_rank:
        for f in findings:
            groups.setdefault((f.code, f.where or (f.title,)), []).append((rank, f))
    out = []
    for items in groups.values():
        ranks = sorted({r for r, _ in items})
        first = min(items, key=lambda rf: rf[0])[1]
        scope = f"all {world_size} ranks" if len(ranks) == world_size and world_size > 1 else _rank_list(ranks)
        out.append(dataclasses.replace(first, evidence=f"[{scope}] {first.evidence}"))
    return out


def _peer_caused(r: RunResult) -> bool:
    """A failure raised because another rank went away (a collective's connection closed)."""
    return r.status != "crashed" and any(w in (r.traceback or r.message).lower() for w in _PEER_WORDS)


def _root_failure(results: list[RunResult], interrupted: bool) -> int | None:
    """The rank whose failure ended the job: the first to fail on its own. None when no rank
    failed, or when every failure was a peer's going away and the job was interrupted or a rank
    timed out (that rank's watchdog ended first and closed the collective under the others: the
    job timed out, it did not fail). A rank torchrun stopped because another failed is
    ``interrupted`` too: that alone does not hide the other's failure."""
    failed = [i for i, r in enumerate(results)
              if r.status in _FAILED or (r.status == "exited" and r.exit_code not in (0, None))]
    if not failed:
        return None
    if (interrupted or any(r.status == "timeout" for r in results)) and all(_peer_caused(results[i]) for i in failed):
        return None

    def key(i: int) -> tuple:
        return (_peer_caused(results[i]), results[i].status == "crashed", results[i].elapsed)
    return min(failed, key=key)


def _primary(job: JobResult, dists: tuple[RankDist, ...]) -> tuple[RunResult, int]:
    results = job.results
    failed = _root_failure(results, job.status == "interrupted")
    if failed is not None:
        r = results[failed]
        return dataclasses.replace(r, message=f"rank {dists[failed].rank}: {r.message}"), failed
    base = next((i for i, r in enumerate(results) if r.observations is not None), 0)
    r = results[base]
    if job.status == "interrupted":
        return dataclasses.replace(r, status="interrupted", message=job.message), base
    if job.status == "timeout" or any(x.status == "timeout" for x in results):
        waiting = [f"{d.rank} ({d.waiting_in}, {d.waiting_s:.1f} s)" for d in dists if d.waiting_in]
        idle = [str(d.rank) for d in dists if not d.waiting_in]
        msg = f"timed out after {job.spec.timeout:g} s"
        if waiting:
            msg += "; ranks waiting inside a collective: " + ", ".join(waiting)
            if idle:
                msg += "; not in a collective (the ranks the others waited for): " + ", ".join(idle)
        return dataclasses.replace(r, status="timeout", message=msg), base
    if job.status == "crashed":
        return dataclasses.replace(r, status="crashed", message=job.message), base
    return r, base


def diagnose_job(job: JobResult, thresholds: Thresholds | None = None) -> Diagnosis:
    th = thresholds or Thresholds()
    results = job.results
    if not results:
        r = RunResult(spec=job.spec, status="crashed", message=job.message, returncode=job.returncode)
        return Diagnosis(result=r, observations=Observations(), thresholds=th, signum=job.signum)
    merged = merge_ranks(results, th)
    primary, base = _primary(job, merged.ranks)
    per_rank = [diagnose(r, th, scope="rank") for r in results]
    obs = dataclasses.replace(primary.observations or Observations(), distributed=merged)
    if merged.world_size > 1 and not merged.initialized:
        obs.notes = [*obs.notes, INDEPENDENT_NOTE.format(n=merged.world_size)]
    job_diag = diagnose(dataclasses.replace(primary, observations=obs), th, scope="job")
    findings = merge_findings([(merged.ranks[i].rank, d.findings) for i, d in enumerate(per_rank)],
                              merged.world_size) + job_diag.findings
    findings = settle(findings, th)
    views = [rank_view(r.observations or Observations(), rank=d.rank, world_size=merged.world_size, dist=d)
             for r, d in zip(results, merged.ranks)]
    errors = sorted({e for d in per_rank for e in d.errors} | set(job_diag.errors))
    return Diagnosis(result=primary, observations=job_diag.observations, findings=findings,
                     skipped=per_rank[base].skipped + job_diag.skipped, errors=errors, thresholds=th,
                     world_size=merged.world_size, rank_views=views,
                     rank_status=[{"rank": d.rank, "status": r.status, "message": r.message,
                                   "traceback": r.traceback} for r, d in zip(results, merged.ranks)],
                     stragglers=[s.rank for s in merged.stragglers], signum=job.signum,
                     fidelity=per_rank[base].fidelity)
