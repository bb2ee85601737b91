"""The ranks of a torchrun job side by side (terminal, rich); decides nothing."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

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


def rank_rows(d: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The ranks side by side as plain cells: (headers, rows), one column per rank."""
    late = set(d["stragglers"])
    ranks = d["ranks"]
    headers = [""] + [f"rank {r['rank']}" + (" (straggler)" if r["rank"] in late else "") for r in ranks]
    st = [r["step_time"] or {} for r in ranks]
    rows = [["status", *(r["status"] for r in ranks)],
            ["step (median)", *(fmt_seconds(s.get("median")) if s else "n/a" for s in st)],
            ["step (p90)", *(fmt_seconds(s.get("p90")) if s else "n/a" for s in st)],
            ["samples/s", *(f"{r['samples_per_s']:.0f}" if r.get("samples_per_s") else "n/a" for r in ranks)]]
    for p in RANK_PHASES:
        if any((r["breakdown"] or {}).get(p) for r in ranks):
            rows.append([f"{p} (mean)", *(fmt_seconds((r["breakdown"] or {}).get(p)) for r in ranks)])
    if any(r.get("allreduce_bytes_per_step") for r in ranks):
        rows.append(["all-reduce/step", *(f"{fmt_bytes(r['allreduce_bytes_per_step'])} in "
                                          f"{r['allreduce_rounds_per_step']:g} round(s)"
                                          if r.get("allreduce_bytes_per_step") else "" for r in ranks)])
    return headers, rows


def render_ranks(diag, d: dict[str, Any], con) -> None:
    """The per-rank table, spread, all-reduce volume, the failing rank's traceback."""
    if d["world_size"] <= 1:
        return
    late = set(d["stragglers"])
    headers, rows = rank_rows(d)
    table = Table(title=f"{d['world_size']} ranks side by side", title_justify="left")
    table.add_column("")
    for r, h in zip(d["ranks"], headers[1:]):
        table.add_column(h.replace(" (straggler)", "*"), justify="right",
                         style="bold red" if r["rank"] in late else None)
    for row in rows:
        table.add_row(*row)
    con.print(table)
    if late:
        con.print("* straggler: the other ranks steadily wait for it (see the findings)")
    sp = spread(diag.ranks())
    if sp is not None:
        con.print(f"step-time spread: rank {sp.slowest_rank} {fmt_seconds(sp.slowest)} / rank {sp.fastest_rank} "
                  f"{fmt_seconds(sp.fastest)} = {sp.ratio:.2f}x (medians)")
    vols = [r["allreduce_bytes_per_step"] for r in d["ranks"] if r.get("allreduce_bytes_per_step")]
    if vols:
        con.print(f"all-reduce volume per optimizer step: {fmt_bytes(sum(vols))} over {len(vols)} ranks "
                  f"({fmt_bytes(max(vols))} per rank)")
    job = diag.observations.distributed
    if job is not None and job.ranks:
        line = _ddp_line(job.ranks[0].ddp_logging)
        if line:
            con.print(line, markup=False, highlight=False)
        src = job.ranks[0].reduction_source
        if src:
            con.print(f"collective waits: explicit torch.distributed calls timed; DDP's reduction by {src}",
                      markup=False, highlight=False)
    if d["traceback"]:
        con.print(Text(f"\nTraceback of the rank that failed first ({d['message']}):", style="bold"))
        con.print(d["traceback"].rstrip(), markup=False, highlight=False)
