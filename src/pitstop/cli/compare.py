"""``pitstop compare A B``: two doctor reports, or two traces of one job, side by side.

Exit codes: 0 compared, 1 ``--fail-over PCT`` given and the step got slower than PCT beyond
noise, 2 bad input (unreadable file, unknown kind, one report and one trace).
"""

from __future__ import annotations

import argparse
import sys

from pitstop.cli import EXIT_FINDINGS, EXIT_OK, CliError, Command, check_number


class CompareCommand(Command):
    name = "compare"
    help = ("Compare two doctor reports (pitstop doctor --format json) or two traces of one job: per-phase, "
            "per-operator and per-kernel deltas with a noise-aware verdict.")
    order = 37

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A",
                            help="the baseline: a doctor JSON report, a trace file, a folder of per-rank traces, "
                                 "or a saved pitstop trace --format json report")
        parser.add_argument("b", metavar="B", help="the candidate, of the same kind as A")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--fail-over", type=float, metavar="PCT", default=None,
                            help="exit 1 when B's step is slower than A's by more than PCT percent, beyond noise "
                                 "(a CI regression gate)")
        parser.add_argument("--top", type=int, default=15, metavar="N",
                            help="operators and kernels shown, largest changes first (default 15; 0: all)")
        parser.add_argument("--confidence", type=float, default=0.9, help="confidence of the intervals (default 0.9)")
        parser.epilog = "exit codes: 0 compared, 1 --fail-over exceeded, 2 bad input"

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.compare import CompareInputError, compare_sides, load_side, sniff

        check_number("--fail-over", args.fail_over, low=0)
        check_number("--confidence", args.confidence, low=0, high=1, low_open=True, high_open=True)
        if args.top < 0:
            raise CliError(f"--top must be >= 0, got {args.top}")
        try:
            kinds = sniff(args.a), sniff(args.b)
            if kinds[0] != kinds[1]:
                raise CliError(f"A is a {kinds[0]} and B a {kinds[1]}: compare two doctor reports or two traces")
            a, b = load_side(args.a), load_side(args.b)
        except CompareInputError as exc:
            raise CliError(str(exc)) from None
        comparison = compare_sides(a, b, confidence=args.confidence, fail_over=args.fail_over, top=args.top)
        if args.format == "json":
            from pitstop.report.compare_json import to_json

            sys.stdout.write(to_json(comparison) + "\n")
        else:
            from pitstop.report import make_console
            from pitstop.report.compare_text import render

            render(comparison, make_console(width=140))
        return EXIT_FINDINGS if comparison.failed else EXIT_OK
