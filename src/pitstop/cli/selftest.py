"""``pitstop selftest --device cuda|cpu``: the device paths end to end (doctor with its trace,
``pitstop trace`` on that live trace, ``pitstop compare``, ``pitstop bench``).

Exit codes: 0 every stage passed, or ``--device cuda`` skipped because no GPU is available
(one line says so); 1 a stage failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pitstop.cli import EXIT_FINDINGS, EXIT_OK, Command, check_output_file, check_writable_dir


class SelftestCommand(Command):
    name = "selftest"
    help = ("Check the device paths end to end: the doctor on a bundled example with its trace, pitstop trace "
            "on that trace, pitstop compare, and pitstop bench.")
    order = 90

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--device", choices=("cpu", "cuda"), required=True,
                            help="cuda: probes on CUDA events and every benchmark (skipped without a GPU); "
                                 "cpu: the same chain, small and quick")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help="where the reports and the trace go (default: a new temporary folder)")
        parser.add_argument("--bench-out", type=Path, metavar="FILE.md",
                            help="the bench page (default DIR/bench-DEVICE.md; on a GPU: docs/bench/gpu.md to "
                                 "fill that page); its JSON goes beside it")
        parser.add_argument("--bench", nargs="*", metavar="CODE", default=None,
                            help="benchmarks to run (default: one quick one on cpu, all on cuda)")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.epilog = "exit codes: 0 passed (or --device cuda skipped: no GPU), 1 a stage failed, 2 usage error"

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.selftest import cuda_unavailable, plan_for, run_selftest, skipped

        out = args.out or Path(tempfile.mkdtemp(prefix=f"pitstop-selftest-{args.device}-"))
        check_writable_dir(out, "--out")
        if args.bench_out is not None:
            check_output_file(args.bench_out, "--bench-out")
        reason = cuda_unavailable() if args.device == "cuda" else None
        if reason is not None:
            report = skipped(args.device, out, reason)
        else:
            from pitstop.report import make_console

            console = make_console(stderr=True)

            def progress(stage):
                console.print(f"selftest: {stage.name} {stage.status} ({stage.seconds:.1f} s)")

            report = run_selftest(plan_for(args.device, args.bench), out, args.bench_out, on_stage=progress)
            self._bench_page(report, args)
        if args.format == "json":
            from pitstop.jsoncodec import dumps

            sys.stdout.write(dumps(report.to_dict()) + "\n")
        else:
            from pitstop.report import make_console
            from pitstop.report.selftest_text import render

            render(report, make_console())
        return EXIT_OK if report.ok else EXIT_FINDINGS

    @staticmethod
    def _bench_page(report, args) -> None:
        from pitstop.atomic import write_atomic
        from pitstop.report.selftest_text import bench_page

        bench = next((s for s in report.stages if s.name == "bench" and s.status == "ok"), None)
        if bench is None:
            return
        md = Path(next(f for f in bench.files if f.endswith(".md")))
        command = "pitstop selftest --device " + args.device + (f" --bench-out {args.bench_out}" if args.bench_out else "")
        write_atomic(md, bench_page(args.device, command, md.read_text(encoding="utf-8")))
