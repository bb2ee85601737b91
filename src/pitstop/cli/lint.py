"""``pitstop lint``: the static rules of the catalog over files and folders, ruff-style."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pitstop.cli import CliError, Command, check_output_file

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.I)


def _size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2MB, 500k, 0 for no limit)")
    unit = (m[2] or "b").lower()[:1]
    return int(float(m[1]) * {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit])


def _codes(values: list[str] | None) -> tuple[str, ...]:
    return tuple(c.strip().upper() for v in values or () for c in v.split(",") if c.strip())


class LintCommand(Command):
    name = "lint"
    help = "Find PyTorch speed and correctness problems in source code (static rules, autofixes)."
    order = 20

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: .)")
        p.add_argument("--format", "--output-format", dest="format", choices=("text", "json", "sarif", "github"),
                       default="text", help="output format (default: text)")
        p.add_argument("--fix", action="store_true", help="apply safe fixes in place")
        p.add_argument("--unsafe-fixes", action="store_true", help="also apply (with --fix) or show unsafe fixes")
        p.add_argument("--diff", action="store_true", help="print the fixes as a unified diff; write nothing")
        p.add_argument("--select", action="append", metavar="CODES", help="only these codes or prefixes (comma-separated)")
        p.add_argument("--extend-select", action="append", metavar="CODES", help="add codes to the selection")
        p.add_argument("--ignore", action="append", metavar="CODES", help="skip these codes or prefixes")
        p.add_argument("--statistics", action="store_true", help="count findings per code")
        p.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
        p.add_argument("--exit-non-zero-on-fix", action="store_true", help="exit 1 when --fix changed files")
        p.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary")
        p.add_argument("-o", "--output-file", type=Path, help="write the report to this file")
        p.add_argument("--config", type=Path, help="pyproject.toml to read [tool.pitstop.lint] from")
        p.add_argument("--isolated", action="store_true", help="ignore every configuration file")
        p.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: one per core)")
        p.add_argument("--max-file-size", type=_size, default=None,
                       help="skip larger files with an error (default 2MB; 0: no limit)")
        p.add_argument("--force-exclude", action="store_true",
                       help="apply the excludes (.gitignore, build/, venvs, [tool.pitstop.lint] exclude) to paths named explicitly too (pre-commit)")
        p.add_argument("--all", dest="show_all", action="store_true",
                       help="also show, count and fix findings about cost in code that runs once (setup, converters, "
                            "exports) or whose frequency is unknown; hidden by default in every format")
        p.add_argument("--preview", action="store_true",
                       help="also run the rules and sub-patterns whose measured precision does not yet put them on by "
                            "default (`pitstop tips --face L` shows each one's figure; --select CODE runs one)")
        p.add_argument("--show-files", action="store_true", help="list the files that would be linted and exit")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.lint.command import LintOutputError, LintRequest, run_lint, select_rules
        from pitstop.lint.config import ConfigError

        req = LintRequest(
            paths=tuple(Path(p) for p in args.paths), select=_codes(args.select),
            extend_select=_codes(args.extend_select), ignore=_codes(args.ignore), config=args.config,
            isolated=args.isolated, format=args.format, fix=args.fix, unsafe_fixes=args.unsafe_fixes, diff=args.diff,
            statistics=args.statistics, exit_zero=args.exit_zero, exit_non_zero_on_fix=args.exit_non_zero_on_fix,
            quiet=args.quiet, output_file=args.output_file, jobs=args.jobs, max_file_size=args.max_file_size,
            force_exclude=args.force_exclude, show_files=args.show_files,
            show_all=args.show_all, preview=args.preview)
        try:
            selection = select_rules(req)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        if args.jobs < 0:
            raise CliError("--jobs must be >= 0")
        if args.output_file is not None:
            check_output_file(args.output_file, "-o/--output-file")  # before linting, not after
        try:
            return run_lint(req, selection)
        except LintOutputError as exc:
            raise CliError(str(exc)) from None
