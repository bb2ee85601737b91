"""``pitstop tune``: A/B-measure each trick on a training script, keep what is faster and equivalent.

Exit codes: 0 the search ran (keeping nothing is a normal result), 2 usage or input error
(missing script, syntax error, unknown --only code, bad numbers), 3 the script itself
fails (its baseline run raised, exited early or timed out: nothing can be tuned).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from pitstop.cli import EXIT_OK, CliError, Command, check_number, check_output_file, split_at_double_dash

EXIT_SCRIPT_FAILED = 3
MAX_MARGIN = 10.0  # as pitstop.tune.options.TuneOptions accepts



def _codes(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.replace(" ", ",").split(",") if c.strip())


class TuneCommand(Command):
    name = "tune"
    help = ("A/B-measure each speed trick on a training script (default: the bundled naive CNN); keep only "
            "what is faster beyond the noise and loss-equivalent, and print the winning recipe.")
    order = 30

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("script", nargs="?", help="training script (default: the bundled naive CNN)")
        parser.add_argument("script_args", nargs="*", metavar="-- SCRIPT_ARGS", help="arguments for the script, after --")
        parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module as with python -m MODULE")
        parser.add_argument("--steps", type=int, default=None,
                            help="optimizer steps measured per run (default 10, more where a run's set-up takes "
                                 "longer than its steps; giving N fixes it)")
        parser.add_argument("--warmup", type=int, default=3, help="optimizer steps before measuring (default 3)")
        parser.add_argument("--repeats", type=int, default=3,
                            help="pairs (trial run between two baseline runs) before a verdict, at least 2 (default 3)")
        parser.add_argument("--max-pairs", type=int, default=8,
                            help="pairs after which a still undecided trial is 'no gain' (default 8)")
        parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                            help="bound the whole search; runs that no longer fit are skipped (default: none)")
        parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                            help="one run longer than this is stopped and reported failed (default 300)")
        parser.add_argument("--only", type=_codes, default=(), metavar="CODES",
                            help="comma-separated tip codes or knob names, e.g. PIT301,PIT104")
        parser.add_argument("--try", dest="try_values", action="append", default=[], metavar="KNOB=VALUE",
                            help="also try a value its knob does not choose here, e.g. autocast=fp16 (fp16 + "
                                 "GradScaler where bf16 is the fast format); repeatable")
        parser.add_argument("--margin", type=float, default=None,
                            help="the paired interval must lie above 1 + MARGIN to keep a trick (default 0.05)")
        parser.add_argument("--threads", type=int, default=None, metavar="N",
                            help="torch.set_num_threads(N) in every run, baseline included (default: torch's)")
        parser.add_argument("--seed", type=int, default=0, help="seed of every run (default 0)")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--save-recipe", type=Path, metavar="PATH",
                            help="write the winning Recipe (.toml or .json) for pitstop.fit / Recipe.load")
        parser.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                            help="run every trial as a torchrun job of N ranks (DDP scripts): the slowest rank's "
                                 "step time, the loss checked on every rank")
        parser.add_argument("--memory-budget", metavar="SIZE",
                            help="instead of the speed search: the cheapest combination that fits in SIZE of device "
                                 "memory (e.g. 12GiB) and keeps the effective batch (checkpointing, bf16; smaller "
                                 "DataLoader batches when nothing else fits), losses checked")
        parser.add_argument("--bench-report", type=Path, default=None, metavar="FILE",
                            help="a `pitstop bench --format json` report from this machine: its measured ratios order "
                                 "the measuring (verdicts still come from the pairs)")
        parser.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                            help="progress bar on stderr (auto: when stderr is a terminal)")
        split_at_double_dash(parser)

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.examples import DEFAULT_SCRIPT

        if args.module and args.script:
            args.script_args = [args.script, *args.script_args]  # with -m the first positional is a script arg
            args.script = None
        for name, low in (("steps", 1), ("warmup", 0), ("repeats", 1), ("max_pairs", 1)):
            if getattr(args, name) is not None and getattr(args, name) < low:
                raise CliError(f"--{name} must be >= {low}, got {getattr(args, name)}")
        from pitstop.doctor.run.spec import MAX_TIMEOUT

        check_number("--budget", args.budget, low=0, low_open=True)
        check_number("--timeout", args.timeout, low=0, high=MAX_TIMEOUT, low_open=True)
        check_number("--margin", args.margin, low=0, high=MAX_MARGIN, high_open=True)
        if args.threads is not None and args.threads < 1:
            raise CliError(f"--threads must be >= 1, got {args.threads}")
        if args.nproc_per_node is not None and args.nproc_per_node < 1:
            raise CliError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
        if args.save_recipe is not None:  # checked before the search, not after it
            if args.save_recipe.suffix.lower() not in (".toml", ".json"):
                raise CliError(f"--save-recipe {args.save_recipe}: use a .toml or .json file name")
            check_output_file(args.save_recipe, "--save-recipe")
        module = args.module if args.module else (None if args.script else DEFAULT_SCRIPT)
        from pitstop.tune.knob import all_knobs
        from pitstop.tune.api import tune_script
        from pitstop.tune.options import TuneOptions, select_knobs

        try:
            select_knobs(all_knobs(), args.only)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        try:
            TuneOptions(try_values=tuple(args.try_values))
            select_knobs(all_knobs(), [t.partition("=")[0].strip() for t in args.try_values])
        except ValueError as exc:
            raise CliError(str(exc).replace("--only:", "--try:").replace("try_values:", "--try:")) from None
        bench = ()
        if args.bench_report is not None:
            from pitstop.tune.options import read_bench_priors

            try:
                bench = read_bench_priors(str(args.bench_report))
            except ValueError as exc:
                raise CliError(f"--bench-report {exc}") from None
        progress = {"auto": None, "on": True, "off": False}[args.progress]
        if args.memory_budget is not None:
            return _memory_budget(args, module)
        result = _searched(lambda: tune_script(
            script=args.script, module=module, args=args.script_args, steps=args.steps, warmup=args.warmup,
            repeats=args.repeats, budget=args.budget, only=args.only, timeout=args.timeout, margin=args.margin,
            seed=args.seed, progress=progress, threads=args.threads, max_pairs=args.max_pairs,
            nproc_per_node=args.nproc_per_node, try_values=tuple(args.try_values), bench=bench))
        if result is None:
            return EXIT_SCRIPT_FAILED
        if args.format == "json":
            from pitstop.report.tune_terminal import render_json

            sys.stdout.write(render_json(result) + "\n")
        else:
            from pitstop.report.tune_terminal import render_text

            render_text(result)
        if args.save_recipe is not None:  # after the results are out: a failed write loses nothing printed
            sys.stdout.flush()
            try:
                result.recipe().save(args.save_recipe)  # atomic (pitstop.atomic.write_atomic)
            except OSError as exc:
                raise CliError(f"--save-recipe {args.save_recipe}: cannot write: {exc.strerror or exc} (the results "
                               "above are complete; save the recipe they print by hand)") from None
            print(f"recipe written to {args.save_recipe} (load it with pitstop.Recipe.load)", file=sys.stderr)
        return EXIT_OK


def _searched(search: Callable[[], Any]) -> Any:
    """What ``search`` returns; a usage error (``TuneInputError``) becomes the CLI's one-line error,
    a failed search (``TuneError``) its message on stderr and None."""
    from pitstop.tune.options import TuneError
    from pitstop.tune.script import TuneInputError

    try:
        return search()
    except TuneInputError as exc:
        raise CliError(str(exc)) from None
    except TuneError as exc:
        print(f"pitstop tune: {exc}", file=sys.stderr)
        return None


def _memory_budget(args: argparse.Namespace, module: str | None) -> int:
    """``pitstop tune --memory-budget SIZE``: the memory-budget search (:mod:`pitstop.tune.memfit.script`)."""
    from pitstop.tune.memfit.script import tune_memory_script
    from pitstop.tune.peak import parse_bytes

    try:
        budget = parse_bytes(args.memory_budget)
    except ValueError as exc:
        raise CliError(f"--memory-budget: {exc}") from None
    fit = _searched(lambda: tune_memory_script(script=args.script, module=module, args=args.script_args, budget=budget,
                                               steps=args.steps, warmup=args.warmup, timeout=args.timeout,
                                               seed=args.seed))
    if fit is None:
        return EXIT_SCRIPT_FAILED
    if args.format == "json":
        from pitstop.jsoncodec import dumps, to_json

        sys.stdout.write(dumps(to_json(fit)) + "\n")
    else:
        from pitstop.report.tune_memory import render_budget

        render_budget(fit)
    return EXIT_OK if fit.chosen is not None else EXIT_SCRIPT_FAILED
