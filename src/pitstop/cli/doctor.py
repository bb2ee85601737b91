"""``pitstop doctor``: run a training script under instrumentation and say where time and memory go.

Exit codes (the doctor's own; the CLI-wide "1 = findings" does not apply, findings are
its normal output): 0 diagnosed, 2 usage/input error (missing script, syntax error),
3 the script failed (raised, exited non-zero, crashed), 4 timed out, 5 nothing to
diagnose (no optimizer step was observed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pitstop.cli import CliError, Command, check_number, check_output_file, check_writable_dir, split_at_double_dash



def _check_outputs(html: Path | None, trace: str | None) -> None:
    """Bad output paths are input errors, found before the script runs (not after)."""
    if html is not None:
        check_output_file(html, "--html")
    if trace is not None:
        check_writable_dir(Path(trace), "--trace")


def _cpuinfo(path: Path | None) -> str | None:
    """``--cpuinfo FILE``: a readable file in ``/proc/cpuinfo``'s format (it has a ``flags``
    line), as an absolute path (the script may run in another directory)."""
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError(f"--cpuinfo {path}: cannot read it ({exc.strerror or exc})") from None
    if not any(line.partition(":")[0].strip() == "flags" for line in text.splitlines()):
        raise CliError(f"--cpuinfo {path}: no 'flags' line; give a file in /proc/cpuinfo's format")
    return str(path.resolve())


def _memory_budget(value: str | None) -> int | None:
    """``--memory-budget`` in bytes (``12GiB``, ``16GB``, ``500MiB``, a number of bytes)."""
    if value is None:
        return None
    from pitstop.tune.peak import parse_bytes

    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise CliError(f"--memory-budget: {exc}") from None


def _nnodes(args: argparse.Namespace) -> int:
    """``--nnodes`` as a number of nodes, checked with the options a multi-node job needs."""
    try:
        n = int(args.nnodes)
    except ValueError:
        raise CliError(f"--nnodes must be a number of nodes, got {args.nnodes!r}") from None
    if n < 1:
        raise CliError(f"--nnodes must be >= 1, got {n}")
    if n > 1:
        if args.nproc_per_node is None:
            raise CliError("--nnodes > 1 needs --nproc-per-node M (the ranks on this node)")
        if not args.rdzv_endpoint:
            raise CliError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)")
        if not 0 <= args.node_rank < n:
            raise CliError(f"--node-rank must be in 0..{n - 1}, got {args.node_rank}")
        check_number("--node-wait", args.node_wait, low=0, low_open=True)
    return n


class DoctorCommand(Command):
    name = "doctor"
    help = "Run a training script (default: the bundled naive CNN) and report where time and memory go."
    order = 20

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("script", nargs="?", help="training script to run as __main__ (default: the bundled naive CNN)")
        parser.add_argument("script_args", nargs="*", metavar="-- SCRIPT_ARGS",
                            help="arguments for the script, after --")
        parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module as with python -m MODULE")
        parser.add_argument("--steps", type=int, default=10, help="optimizer steps to observe (default 10)")
        parser.add_argument("--warmup", type=int, default=2, help="optimizer steps to skip first (default 2)")
        parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the script is stopped (default 600)")
        parser.add_argument("--format", choices=("text", "json"), default="text",
                            help="json: the report on stdout, the script's own stdout sent to stderr")
        parser.add_argument("--html", type=Path, metavar="PATH", help="also write a self-contained HTML report")
        parser.add_argument("--trace", metavar="DIR", help="also write a torch.profiler Chrome/Perfetto trace of a few steps")
        parser.add_argument("--no-probes", action="store_true", help="skip the hardware probes (a few seconds each) that gate PIT104/301/501")
        parser.add_argument("--cpuinfo", type=Path, metavar="FILE",
                            help="describe the CPU from FILE (the format of /proc/cpuinfo) instead of this machine's: "
                                 "what the doctor says on another CPU (speeds are still measured here)")
        parser.add_argument("--seed", type=int, default=0, help="seed python/numpy/torch before the script (default 0)")
        parser.add_argument("--memory-budget", metavar="SIZE",
                            help="say what fits in SIZE of device memory (e.g. 12GiB, 16GB, 500MiB): the largest batch "
                                 "and what each memory fix saves, for a run that fits today too (default: the device's "
                                 "capacity, shown when the run runs out of memory)")
        parser.add_argument("--nproc-per-node", type=int, metavar="N",
                            help="run the script as a torchrun job of N ranks on this node (torch.distributed.run), "
                                 "every rank instrumented, one merged report")
        parser.add_argument("--nnodes", default="1", help="torchrun --nnodes (default 1)")
        parser.add_argument("--node-rank", type=int, default=0, help="torchrun --node-rank (default 0)")
        parser.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                            help="torchrun --rdzv-endpoint (default: a standalone rendezvous on the loopback address); "
                                 "with --nnodes N > 1: node 0's address, whose rendezvous store the nodes report through")
        parser.add_argument("--rdzv-backend", choices=("c10d",), default="c10d", help="torchrun --rdzv-backend (c10d)")
        parser.add_argument("--node-wait", type=float, default=120.0, metavar="S",
                            help="--nnodes > 1: seconds node 0 waits for the other nodes after its ranks ended "
                                 "(default 120); a node silent that long is named in a partial report")
        parser.add_argument("--node-report", type=Path, metavar="PATH",
                            help="--nnodes > 1: where this node writes its part (default pitstop-node<K>.json), "
                                 "for pitstop merge")
        parser.add_argument("--job-report", type=Path, metavar="PATH",
                            help="--nnodes > 1, node 0: where the job report is written (default pitstop-job.json)")
        parser.epilog = ("exit codes: 0 diagnosed (findings or not), 2 usage/input error, 3 the script failed, "
                         "4 timed out (partial report), 5 nothing to diagnose (no optimizer step observed)")
        split_at_double_dash(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.doctor.analysis.diagnosis import diagnose
        from pitstop.doctor.run.runner import ScriptNotFoundError, ScriptSyntaxError, run_script
        from pitstop.doctor.run.spec import MAX_TIMEOUT, RunSpec
        from pitstop.examples import DEFAULT_SCRIPT

        if args.module and args.script:
            # with -m, the first positional is the first script argument
            args.script_args = [args.script, *args.script_args]
            args.script = None
        if args.steps < 1:
            raise CliError(f"--steps must be >= 1, got {args.steps}")
        if args.warmup < 0:
            raise CliError(f"--warmup must be >= 0, got {args.warmup}")
        check_number("--timeout", args.timeout, low=0, high=MAX_TIMEOUT, low_open=True)
        if args.nproc_per_node is not None and args.nproc_per_node < 1:
            raise CliError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
        module = args.module if args.module else (None if args.script else DEFAULT_SCRIPT)
        _check_outputs(args.html, args.trace)
        cpuinfo = _cpuinfo(args.cpuinfo)
        budget = _memory_budget(args.memory_budget)
        nnodes = _nnodes(args)
        try:
            spec = RunSpec(script=args.script, module=module, args=tuple(args.script_args), steps=args.steps,
                           warmup=args.warmup, timeout=args.timeout, trace_dir=args.trace, seed=args.seed,
                           probes=not args.no_probes, stdout="stderr" if args.format == "json" else "inherit",
                           nproc_per_node=args.nproc_per_node, nnodes=args.nnodes, node_rank=args.node_rank,
                           rdzv_endpoint=args.rdzv_endpoint, cpuinfo=cpuinfo, memory_budget=budget)
            if nnodes > 1:
                from pitstop.cli.doctor_nodes import run_multinode

                return run_multinode(spec, args)
            if spec.nproc_per_node is not None:
                from pitstop.doctor.analysis.job import diagnose_job
                from pitstop.doctor.run.torchrun import run_job

                diag = diagnose_job(run_job(spec))
            else:
                diag = diagnose(run_script(spec))
        except (ScriptNotFoundError, ScriptSyntaxError) as exc:
            raise CliError(str(exc)) from None
        if args.format == "json":
            from pitstop.jsoncodec import dumps

            sys.stdout.write(dumps(diag.to_dict()) + "\n")
        else:
            from pitstop.report.doctor_terminal import render

            sys.stdout.flush()
            render(diag)
        if args.html:
            from pitstop.report.doctor_html import doctor_html

            from pitstop.atomic import write_atomic

            try:
                write_atomic(args.html, doctor_html(diag))
            except OSError as exc:
                raise CliError(f"--html: cannot write {str(args.html)!r}: {exc.strerror or exc}") from None
            print(f"HTML report: {args.html}", file=sys.stderr)
        return diag.exit_code
