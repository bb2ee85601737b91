"""``pitstop merge REPORT...``: merge the node reports that ``pitstop doctor --nnodes N`` wrote
on each node (``pitstop-node<K>.json``) into the job's report, for clusters whose nodes share
no store after the job. A node without a report is named (partial report).

Exit codes: the doctor's (0 diagnosed, 3 a rank failed or a node is missing ...), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pitstop.cli import CliError, Command


class MergeCommand(Command):
    name = "merge"
    help = "merge the node reports of a multi-node pitstop doctor job (pitstop-node<K>.json) into one job report"
    order = 21

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("reports", nargs="+", metavar="REPORT", help="node reports, one per node")
        parser.add_argument("--nnodes", type=int, default=None, help="nodes in the job (default: as the reports say)")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--job-report", type=Path, metavar="PATH", help="also write the job report (JSON)")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.doctor.analysis.job import diagnose_job
        from pitstop.doctor.run.nodes import NodeError, merge_nodes, read_node_report
        from pitstop.jsoncodec import dumps
        from pitstop.report.doctor_nodes import node_lines
        from pitstop.report.doctor_terminal import render

        try:
            reports = [read_node_report(p) for p in args.reports]
            job, nodes, missing = merge_nodes(reports[0].results[0].spec if reports[0].results else None,
                                              reports, args.nnodes)
        except NodeError as exc:
            raise CliError(str(exc)) from None
        diag = diagnose_job(job)
        if args.job_report:
            from pitstop.cli.doctor_nodes import write_job_report

            write_job_report(args.job_report, diag, nodes, missing)
        if args.format == "json":
            sys.stdout.write(dumps(diag.to_dict()) + "\n")
        else:
            render(diag)
            for line in node_lines(nodes, job_ranks=len(job.results), missing=missing):
                print(line)
        return diag.exit_code
