"""The ranks of a torchrun job side by side (terminal, rich); decides nothing."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from pitstop.doctor.analysis.diagnosis import Diagnosis
from pitstop.ranks import spread
from pitstop.report.terminal import fmt_bytes, fmt_seconds

__all__ = ["render_ranks", "rank_rows", "RANK_PHASES"]

#: the breakdown columns, in order
RANK_PHASES = ("data", "host", "forward", "backward", "optimizer", "collective", "eval", "other")


def _ddp_line(logging: dict[str, Any]) -> str:
    if not logging:
        return ""
    parts = [f"buckets {logging.get('bucket_sizes', '?')} bytes"]
    for key, label in (("avg_backward_compute_time", "backward compute"), ("avg_backward_comm_time", "backward comm"),
                       ("avg_backward_compute_comm_overlap_time", "overlap")):
        if logging.get(key):
            parts.append(f"{label} {fmt_seconds(logging[key] / 1e9)}")
    return "DDP's own logging data (rank 0, sampled by DDP): " + ", ".join(parts)


def rank_rows(diag: Diagnosis) -> tuple[list[str], list[list[str]]]:
    """The ranks side by side as plain cells: (headers, rows), one column per rank."""
    late = set(diag.stragglers)
    ranks = diag.ranks()
    headers = [""] + [f"rank {v.rank}" + (" (straggler)" if v.rank in late else "") for v in ranks]
    st = [v.step_time for v in ranks]
    rows = [["status", *(diag.rank_outcome(v.rank)[0] for v in ranks)],
            ["step (median)", *(fmt_seconds(s.median) if s is not None else "n/a" for s in st)],
            ["step (p90)", *(fmt_seconds(s.p90) if s is not None else "n/a" for s in st)],
            ["samples/s", *(f"{v.samples_per_s:.0f}" if v.samples_per_s else "n/a" for v in ranks)]]
    for p in RANK_PHASES:
        if any(v.breakdown.get(p) for v in ranks):
            rows.append([f"{p} (mean)", *(fmt_seconds(v.breakdown.get(p)) for v in ranks)])
    allreduce = [diag.rank_allreduce(v.rank) for v in ranks]
    if any(ar is not None and ar[0] for ar in allreduce):
        rows.append(["all-reduce/step", *(f"{fmt_bytes(ar[0])} in {ar[1]:g} round(s)"
                                          if ar is not None and ar[0] else "" for ar in allreduce)])
    job = diag.observations.distributed
    shards = {r.rank: r.shard for r in job.ranks} if job is not None else {}
    if any(shards.get(v.rank) is not None for v in ranks):
        for label, secs, n, nbytes in (("all-gather/step", "all_gather_s", "all_gathers", "all_gather_bytes"),
                                       ("reduce-scatter/step", "reduce_scatter_s", "reduce_scatters",
                                        "reduce_scatter_bytes")):
            rows.append([label, *(f"{fmt_seconds(sh.mean(secs))} in {sh.mean(n):g} ({fmt_bytes(sh.mean(nbytes))})"
                                  if (sh := shards.get(v.rank)) is not None else "" for v in ranks)])
    return headers, rows


def _shard_line(shard: Any) -> str:
    """The sharded model of rank 0: framework, units, dtypes, what the rank holds."""
    names = [u.name or "(root)" for u in shard.units]
    units = ", ".join(names[:4]) + (f" ... ({len(names)} in all)" if len(names) > 4 else "")
    gather = shard.param_dtype or shard.stored_dtype
    return (f"sharded ({shard.framework}, {shard.sharding}, {shard.world_size} ranks): units {units}; all-gathers in "
            f"{gather}, gradients reduced in {shard.reduce_dtype or gather}; rank 0 holds parameter shards of "
            f"{fmt_bytes(shard.local_param_bytes)} (whole: {fmt_bytes(shard.full_param_bytes)}), replicated "
            f"parameters {fmt_bytes(shard.replicated_param_bytes)}")


def render_ranks(diag: Diagnosis, con: Any) -> None:
    """The per-rank table, spread, all-reduce volume, the failing rank's traceback."""
    if diag.world_size <= 1:
        return
    late = set(diag.stragglers)
    ranks = diag.ranks()
    headers, rows = rank_rows(diag)
    table = Table(title=f"{diag.world_size} ranks side by side", title_justify="left")
    table.add_column("")
    for v, h in zip(ranks, headers[1:]):
        table.add_column(h.replace(" (straggler)", "*"), justify="right",
                         style="bold red" if v.rank in late else None)
    for row in rows:
        table.add_row(*row)
    con.print(table)
    if late:
        con.print("* straggler: the other ranks steadily wait for it (see the findings)")
    sp = spread(ranks)
    if sp is not None:
        con.print(f"step-time spread: rank {sp.slowest_rank} {fmt_seconds(sp.slowest)} / rank {sp.fastest_rank} "
                  f"{fmt_seconds(sp.fastest)} = {sp.ratio:.2f}x (medians)")
    vols = [ar[0] for v in ranks if (ar := diag.rank_allreduce(v.rank)) is not None and ar[0]]
    if vols:
        con.print(f"all-reduce volume per optimizer step: {fmt_bytes(sum(vols))} over {len(vols)} ranks "
                  f"({fmt_bytes(max(vols))} per rank)")
    job = diag.observations.distributed
    if job is not None and job.ranks:
        line = _ddp_line(job.ranks[0].ddp_logging)
        if line:
            con.print(line, markup=False, highlight=False)
        if job.ranks[0].shard is not None:
            con.print(_shard_line(job.ranks[0].shard), markup=False, highlight=False)
        src = job.ranks[0].reduction_source
        if src:
            con.print(f"collective waits: explicit torch.distributed calls timed; DDP's reduction by {src}",
                      markup=False, highlight=False)
    traceback = diag.result.traceback
    if traceback:
        con.print(Text(f"\nTraceback of the rank that failed first ({diag.headline}):", style="bold"))
        con.print(traceback.rstrip(), markup=False, highlight=False)
