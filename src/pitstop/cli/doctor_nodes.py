"""The multi-node end of ``pitstop doctor --nnodes N`` (called by ``cli/doctor.py``): run this
node, exchange through the rendezvous store, print this node's part or the job report, write
the node report (for ``pitstop merge``) and, on node 0, the job report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pitstop.cli import CliError

__all__ = ["run_multinode", "write_job_report"]


def write_job_report(path: Path, diag, nodes, missing) -> None:
    """The job report file: the merged diagnosis and the nodes (JSON)."""
    from pitstop.atomic import write_atomic
    from pitstop.jsoncodec import dumps, to_json

    doc = {"kind": "pitstop-job-report", "nodes": to_json(list(nodes)), "missing_nodes": list(missing),
           "diagnosis": diag.to_dict()}
    try:
        write_atomic(path, dumps(doc) + "\n")
    except OSError as exc:
        raise CliError(f"cannot write the job report {str(path)!r}: {exc.strerror or exc}") from None


def run_multinode(spec, args: argparse.Namespace) -> int:
    from pitstop.atomic import write_atomic
    from pitstop.doctor.analysis.job import diagnose_job
    from pitstop.doctor.run.nodes import run_nodes
    from pitstop.jsoncodec import dumps
    from pitstop.report.doctor_nodes import print_nodes
    from pitstop.report.doctor_terminal import render

    node_path = args.node_report or Path(f"pitstop-node{args.node_rank}.json")
    job_path = (args.job_report or Path("pitstop-job.json")).resolve() if args.node_rank == 0 else None
    try:
        outcome = run_nodes(spec, wait_s=args.node_wait, job_report=str(job_path) if job_path else None)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        write_atomic(node_path, dumps(outcome.own.to_dict(), indent=None) + "\n")
    except OSError as exc:
        print(f"note: cannot write the node report {str(node_path)!r}: {exc.strerror or exc}", file=sys.stderr)
    diag = diagnose_job(outcome.job)
    if job_path is not None:
        write_job_report(job_path, diag, outcome.nodes, outcome.missing)
    if args.format == "json":
        sys.stdout.write(dumps(diag.to_dict()) + "\n")
        print_nodes(outcome, sys.stderr)
    else:
        sys.stdout.flush()
        render(diag)
        print_nodes(outcome, sys.stdout)
    print(f"node report: {node_path}", file=sys.stderr)
    if args.html:
        from pitstop.report.doctor_html import doctor_html

        write_atomic(args.html, doctor_html(diag))
    return diag.exit_code
