"""``pitstop bench``: reproduce each tip's claim with a measured number on this machine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pitstop.cli import EXIT_FINDINGS, EXIT_OK, CliError, Command, check_output_file


class BenchCommand(Command):
    name = "bench"
    help = "Measure each tip's claim on this machine (face B) and say whether it holds here."
    order = 40

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("codes", nargs="*", metavar="CODE", help="tip codes or slugs (default: every benchmark)")
        parser.add_argument("--quick", action="store_true",
                            help="small sizes and few rounds: all benchmarks in well under a minute (noisier)")
        parser.add_argument("--device", choices=("cpu", "cuda"), help="force a device (default: cuda if available)")
        parser.add_argument("--threads", type=int, metavar="N", default=1,
                            help="torch intra-op threads while measuring (default 1, like torch.utils.benchmark: "
                                 "stable ratios on a busy machine; give the core count for multi-threaded speed)")
        parser.add_argument("--budget", type=float, metavar="SECONDS",
                            help="seconds the whole run aims at (default 60, 30 with --quick): each benchmark "
                                 "warms up once, times rounds sized to its share and stops once its verdict is "
                                 "decided; set-up and compile time come on top")
        parser.add_argument("--format", choices=("text", "json", "markdown"), default="text")
        parser.add_argument("--html", type=Path, metavar="PATH", help="also write a self-contained HTML report")
        parser.add_argument("--json", type=Path, metavar="PATH", dest="json_path",
                            help="also write the JSON report (with every sample) to PATH")
        parser.add_argument("--list", action="store_true", help="list the benchmarks and their claims, run nothing")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.bench.runner import UnknownBenchmarkError, select

        try:
            selected = select(args.codes)
        except UnknownBenchmarkError as exc:
            raise CliError(str(exc)) from None
        if args.list:
            for cls in selected:
                c = cls.claim
                gpu = " [GPU only]" if cls.gpu_only else ""
                print(f"{cls.tip}  {cls.title}{gpu}\n        seed {c.seed}: {c.text}")
            return EXIT_OK
        if args.threads < 1:
            raise CliError(f"--threads must be >= 1, got {args.threads}")
        if args.budget is not None and not args.budget > 0:
            raise CliError(f"--budget must be > 0 seconds, got {args.budget:g}")
        for opt, path in (("--html", args.html), ("--json", args.json_path)):
            if path is None:
                continue
            check_output_file(path, opt)  # fail before measuring, not after

        from pitstop.bench.device import pick_device
        from pitstop.bench.timing import BenchConfig

        try:
            device = pick_device(args.device)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        config = BenchConfig(mode="quick" if args.quick else "full", device=device, threads=args.threads,
                             budget=args.budget)
        report = self._run(selected, config)

        from pitstop.atomic import write_atomic
        from pitstop.report.bench_html import to_html
        from pitstop.report.bench_text import print_text, to_json, to_markdown

        if args.format == "json":
            sys.stdout.write(to_json(report) + "\n")
        elif args.format == "markdown":
            cmd = "pitstop bench" + "".join(f" {a}" for a in sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
            sys.stdout.write(to_markdown(report, command=cmd) + "\n")
        else:
            from pitstop.report import make_console

            print_text(report, make_console(width=140))
        for opt, path, text in (("--html", args.html, to_html), ("--json", args.json_path, to_json)):
            if path is None:
                continue
            try:  # atomic: a reader never sees half a report
                write_atomic(path, text(report) + ("" if text is to_html else "\n"))
            except OSError as exc:
                raise CliError(f"{opt} {path}: {exc.strerror or exc}") from None
            print(f"{opt[2:].upper()} report: {path}", file=sys.stderr)
        # A benchmark that raised measured nothing: that is a fault (a failed correctness check, a
        # bug), not a verdict about the machine, so the run exits 1 (like findings) and says which,
        # on stderr too, where a script's log shows it; the other benchmarks' numbers stand.
        errors = [r for r in report.results if r.error]
        for r in errors:
            print(f"pitstop bench: {r.code} raised, not measured: {r.reason}", file=sys.stderr)
        if errors:
            print(f"pitstop bench: exit 1: {len(errors)} of {len(report.results)} benchmark(s) raised an error",
                  file=sys.stderr)
        return EXIT_FINDINGS if errors else EXIT_OK

    @staticmethod
    def _run(selected, config):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from pitstop.bench.runner import run_all
        from pitstop.report import make_console

        console = make_console(stderr=True)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, disable=not console.is_terminal, transient=True) as progress:
            task = progress.add_task("bench", total=len(selected))

            def start(cls):
                extra = " (compiling)" if cls.compiles else ""
                progress.update(task, description=f"{cls.tip} {cls.title[:60]}{extra}")

            def done(result):
                progress.advance(task)

            return run_all(selected, config, on_start=start, on_done=done)
