"""``pitstop lint``: the static rules of the catalog over files and folders, ruff-style."""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from pathlib import Path

from pitstop.cli import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, CliError, Command, check_output_file

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?\s*$", re.I)


def _size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 2MB, 500k, 0 for no limit)")
    unit = (m[2] or "b").lower()[:1]
    return int(float(m[1]) * {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit])


def _codes(values: list[str] | None) -> list[str]:
    return [c.strip().upper() for v in values or () for c in v.split(",") if c.strip()]


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
        p.add_argument("--show-files", action="store_true", help="list the files that would be linted and exit")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop import __version__
        from pitstop.lint import reporters
        from pitstop.lint.parallel import LintOptions, Task, run_tasks
        from pitstop.lint.config import ConfigError, LintConfig, find_pyproject, ignored_for, load_pyproject, resolve_selection
        from pitstop.lint.discovery import Excludes, discover
        from pitstop.lint.runner import DEFAULT_MAX_FILE_SIZE, all_rule_classes
        from pitstop.tips import get

        rules = all_rule_classes()
        known = list(rules)
        try:
            if args.isolated:
                config = LintConfig()
            elif args.config is not None:
                if not args.config.is_file():
                    raise CliError(f"--config {args.config}: no such file")
                config = load_pyproject(args.config)
            else:
                found = find_pyproject(Path.cwd())
                config = load_pyproject(found) if found else LintConfig()
            enabled = resolve_selection(known, config, select=_codes(args.select),
                                        extend_select=_codes(args.extend_select), ignore=_codes(args.ignore))
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        if args.jobs < 0:
            raise CliError("--jobs must be >= 0")
        if args.output_file is not None:
            check_output_file(args.output_file, "-o/--output-file")  # before linting, not after

        excludes = Excludes(config.root, config.exclude, config.extend_exclude)
        found = discover([Path(p) for p in (args.paths or ["."])], force_exclude=args.force_exclude, excludes=excludes)
        if args.show_files:
            for f in found.files:
                print(_display(f))
            return EXIT_OK
        for path, why in found.skipped:
            print(f"{_display(Path(path))}: {why}", file=sys.stderr)
        tasks = []
        for f in found.files:
            codes = enabled - ignored_for(f, config, known)
            tasks.append(Task(str(f), _display(f), tuple(sorted(codes)), may_write=f not in found.outside))
        max_size = args.max_file_size if args.max_file_size is not None else (
            config.max_file_size if config.max_file_size is not None else DEFAULT_MAX_FILE_SIZE)
        opts = LintOptions(fix=args.fix and not args.diff, unsafe=args.unsafe_fixes, diff=args.diff,
                           max_size=max_size, jobs=args.jobs)
        run = run_tasks(tasks, opts)

        from pitstop.lint.findings import FileError

        errors = [FileError(p, r) for p, r in found.errors] + run.errors
        findings = run.findings
        out = io.StringIO() if args.output_file else sys.stdout
        try:
            for e in errors:
                print(str(e), file=sys.stderr)
            if args.diff:
                for r in run.results:
                    out.write(r.diff)
                n = sum(1 for r in run.results if r.diff)
                if not args.quiet:
                    fixable = run.fixed
                    print(f"Would fix {fixable} error{'s' * (fixable != 1)} in {n} file{'s' * (n != 1)}."
                          if fixable else "No fixes available.", file=sys.stderr)
                    if errors:
                        print(reporters.unlinted(len(errors)), file=sys.stderr)
                return EXIT_OK if args.exit_zero else EXIT_USAGE if errors else (EXIT_FINDINGS if n else EXIT_OK)
            for r in run.results:
                if r.note:
                    print(f"{r.filename}: {r.note}", file=sys.stderr)
            if args.format == "json":
                out.write(reporters.json_report(findings, errors))
            elif args.format == "sarif":
                table = [(c, get(c).slug, get(c).title) for c in sorted(enabled)]
                out.write(reporters.sarif(findings, errors, table, __version__))
            elif args.format == "github":
                out.write(reporters.github(findings, errors))
            else:
                if args.statistics:
                    out.write(reporters.statistics(findings, args.unsafe_fixes))
                else:
                    out.write(reporters.text(findings, args.unsafe_fixes))
                if not args.quiet:
                    out.write(reporters.summary(findings, run.fixed, args.unsafe_fixes, len(errors))
                              if tasks or errors else "0 files linted.\n")
        finally:
            if out is not sys.stdout:
                _write_report(args.output_file, out.getvalue())
        if errors and not args.exit_zero:
            return EXIT_USAGE
        if args.exit_non_zero_on_fix and run.fixed:
            return EXIT_FINDINGS
        return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_OK


def _write_report(path: Path, text: str) -> None:
    from pitstop.atomic import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise CliError(f"-o/--output-file {path}: cannot write: {exc.strerror or exc}") from None


def _display(p: Path) -> str:
    try:
        rel = os.path.relpath(p)
    except ValueError:
        return str(p)
    return str(p) if rel.startswith("..") else rel
