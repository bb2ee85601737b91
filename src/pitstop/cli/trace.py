"""``pitstop trace PATH...``: read PyTorch profiler traces offline (one file, or a folder of
one job's per-rank files) and say where the step went, in catalog codes.

Exit codes: 0 analysed (findings are the normal output), 2 usage or input error (a missing,
truncated or non-Kineto file: one line naming it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pitstop.cli import EXIT_OK, CliError, Command, check_output_file


class TraceCommand(Command):
    name = "trace"
    help = "analyse PyTorch profiler (Kineto) traces: GPU busy/idle and why, kernels, syncs, ranks"
    order = 25

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH",
                            help="a trace file (.json, .json.gz, .pt.trace.json[.gz]) or a folder of per-rank traces")
        parser.add_argument("--format", choices=("text", "json"), default="text",
                            help="json: the report as one JSON document (docs/trace-schema.json)")
        parser.add_argument("--html", type=Path, default=None, metavar="FILE",
                            help="also write the report as one offline HTML page")
        parser.add_argument("--workers", type=int, default=None, metavar="N",
                            help="parallel processes for a folder of ranks (default: the CPU count)")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.trace import TraceError, trace

        render_html = None
        if args.html is not None:
            check_output_file(args.html, "--html")
            render_html = _html_renderer()
        if args.workers is not None and args.workers < 1:
            raise CliError(f"--workers must be at least 1, got {args.workers}")
        try:
            report = trace(args.paths, workers=args.workers)
        except TraceError as exc:
            raise CliError(str(exc)) from None
        if args.format == "json":
            from pitstop.jsoncodec import dumps

            print(dumps(report.to_dict()))
        else:
            from pitstop.report.trace_terminal import print_trace

            print_trace(report, sys.stdout)
        if render_html is not None:
            from pitstop.atomic import write_atomic

            write_atomic(args.html, render_html(report))
        return EXIT_OK


def _html_renderer():
    """``pitstop.report.trace_html.render(report) -> str``: the offline page of a TraceReport."""
    try:
        from pitstop.report.trace_html import render  # type: ignore[import-not-found]
    except ImportError:
        raise CliError("--html: the HTML report is not available in this build") from None
    return render
