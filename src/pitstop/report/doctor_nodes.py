"""The nodes of a multi-node ``pitstop doctor`` job in the terminal: which node ran which ranks,
how each ended, which sent nothing, and where the job report is. Renders the typed
:class:`~pitstop.doctor.run.nodes.NodesOutcome` (or the node statuses of ``pitstop merge``);
decides nothing."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from pitstop.doctor.run.nodes import NodeStatus, NodesOutcome
from pitstop.ranks import rank_ranges

__all__ = ["node_lines", "print_nodes"]


def node_lines(nodes: Sequence[NodeStatus], *, job_ranks: int | None = None, missing: Sequence[int] = ()) -> list[str]:
    out = [f"nodes: {len(nodes)}" + (f", {job_ranks} ranks reported" if job_ranks is not None else "")
           + ("; PARTIAL: node " + ", ".join(map(str, missing)) + " sent nothing (died or hung)" if missing else "")]
    for n in nodes:
        ranks = f"ranks {rank_ranges(n.ranks)}" if n.ranks else "no rank"
        msg = f": {n.message}" if n.message else ""
        out.append(f"  node {n.node_rank} ({n.host}): {ranks}, {n.status}{msg}")
    return out


def print_nodes(outcome: NodesOutcome, file: IO[str] | None = None) -> None:
    f = file or sys.stdout
    if outcome.node_rank == 0:
        for line in node_lines(outcome.nodes, job_ranks=len(outcome.job.results), missing=outcome.missing):
            print(line, file=f)
        if outcome.job_report:
            print(f"job report (every node): {outcome.job_report}", file=f)
    else:
        print(f"this is node {outcome.node_rank} of {outcome.nnodes}: the report above is this node's part "
              f"(ranks {rank_ranges(outcome.own.rank_numbers)})", file=f)
        print(f"job report (every node): {outcome.job_report or 'not named by node 0'}", file=f)
    for n in outcome.notes:
        print(f"note: {n}", file=f)
