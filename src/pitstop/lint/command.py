"""What ``pitstop lint`` does once its arguments are parsed: choose the rules, find the files,
lint them in parallel, print the report and give the exit status (ruff's: 0 clean, 1 findings
or ``--exit-non-zero-on-fix`` with fixes, 2 files that could not be linted).

One view (issue 42, :mod:`pitstop.lint.view`): by default only the rules and sub-patterns whose measured
precision holds run (:mod:`pitstop.lint.defaults`; ``--preview`` or an exact ``--select`` code adds the
others), and cost findings in code that runs once are left out (``--all`` adds them); text, GitHub, JSON
and SARIF print that same set, ``--fix``/``--diff`` fix only it, and the exit status counts only it.

The CLI (:mod:`pitstop.cli.lint`) only parses the arguments into a :class:`LintRequest` and
calls :func:`select_rules` then :func:`run_lint`; a :class:`~pitstop.lint.config.ConfigError`
or :class:`LintOutputError` is one line for the user (exit 2).
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pitstop.lint.config import ConfigError, LintConfig, find_pyproject, ignored_for, load_pyproject, resolve_selection
from pitstop.lint.discovery import Discovered, Excludes, discover
from pitstop.lint.findings import FileError
from pitstop.lint.defaults import figures_of_code
from pitstop.lint.parallel import LintOptions, LintRun, Task, run_tasks
from pitstop.lint.view import View

__all__ = ["LintRequest", "Selection", "LintOutputError", "select_rules", "run_lint", "display_path",
           "EXIT_OK", "EXIT_FINDINGS", "EXIT_ERRORS"]

EXIT_OK, EXIT_FINDINGS, EXIT_ERRORS = 0, 1, 2


class LintOutputError(Exception):
    """The report file (``-o``) could not be written."""


@dataclass(frozen=True)
class LintRequest:
    """The parsed command line of ``pitstop lint`` (see ``pitstop lint --help``)."""

    paths: tuple[Path, ...] = ()
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    config: Path | None = None
    isolated: bool = False
    format: str = "text"
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    statistics: bool = False
    exit_zero: bool = False
    exit_non_zero_on_fix: bool = False
    quiet: bool = False
    output_file: Path | None = None
    jobs: int = 0
    max_file_size: int | None = None
    force_exclude: bool = False
    show_files: bool = False
    #: also show, count and fix cost findings in code that runs once (or whose frequency is unknown)
    show_all: bool = False
    #: also run the rules and sub-patterns that are not on by default (pitstop.lint.defaults)
    preview: bool = False


@dataclass(frozen=True)
class Selection:
    """The configuration in force and the codes it enables (before per-file ignores)."""

    config: LintConfig
    known: tuple[str, ...]
    enabled: frozenset[str]
    view: View = View()


def select_rules(req: LintRequest) -> Selection:
    """The configuration (``--isolated``, ``--config`` or the nearest pyproject.toml) and the
    enabled codes; :class:`ConfigError` names the bad file, key or code."""
    from pitstop.lint.runner import all_rule_classes

    known = list(all_rule_classes())
    if req.isolated:
        config = LintConfig()
    elif req.config is not None:
        if not req.config.is_file():
            raise ConfigError(f"--config {req.config}: no such file")
        config = load_pyproject(req.config)
    else:
        found = find_pyproject(Path.cwd())
        config = load_pyproject(found) if found else LintConfig()
    enabled = resolve_selection(known, config, select=list(req.select),
                                extend_select=list(req.extend_select), ignore=list(req.ignore))
    explicit = frozenset(c for c in (*req.select, *req.extend_select, *(config.select or ()), *config.extend_select)
                         if c in known)
    view = View(show_all=req.show_all, preview=req.preview or config.preview, explicit=explicit)
    enabled = {c for c in enabled if view.runs(c, [f.pattern for f in figures_of_code(c)])}
    return Selection(config, tuple(known), frozenset(enabled), view)


def run_lint(req: LintRequest, sel: Selection) -> int:
    """Lint what ``req`` names and print the report; the exit status."""
    found = _discover(req, sel.config)
    if req.show_files:
        for f in found.files:
            print(display_path(f))
        return EXIT_OK
    for path, why in found.skipped:
        print(f"{display_path(Path(path))}: {why}", file=sys.stderr)
    tasks = _tasks(found, sel)
    run = run_tasks(tasks, _options(req, sel.config, sel.view))
    errors = [FileError(p, r) for p, r in found.errors] + run.errors
    for e in errors:
        print(str(e), file=sys.stderr)
    out = io.StringIO() if req.output_file else sys.stdout
    try:
        if req.diff:
            return _report_diff(req, run, errors, out)
        _report(req, sel, run, errors, out, linted=bool(tasks))
    finally:
        if out is not sys.stdout:
            _write_report(req.output_file, out.getvalue())
    return _exit_status(req, sel, run, errors)


def _discover(req: LintRequest, config: LintConfig) -> Discovered:
    excludes = Excludes(config.root, config.exclude, config.extend_exclude)
    return discover(list(req.paths) or [Path(".")], force_exclude=req.force_exclude, excludes=excludes)


def _tasks(found: Discovered, sel: Selection) -> list[Task]:
    known = list(sel.known)
    return [Task(str(f), display_path(f), tuple(sorted(sel.enabled - ignored_for(f, sel.config, known))),
                 may_write=f not in found.outside) for f in found.files]


def _options(req: LintRequest, config: LintConfig, view: View) -> LintOptions:
    from pitstop.lint.runner import DEFAULT_MAX_FILE_SIZE

    max_size = req.max_file_size if req.max_file_size is not None else (
        config.max_file_size if config.max_file_size is not None else DEFAULT_MAX_FILE_SIZE)
    return LintOptions(fix=req.fix and not req.diff, unsafe=req.unsafe_fixes, diff=req.diff,
                       max_size=max_size, jobs=req.jobs, view=view)


def _report_diff(req: LintRequest, run: LintRun, errors: list[FileError], out: IO[str]) -> int:
    """``--diff``: the fixes as a unified diff, a count on stderr; nothing written."""
    from pitstop.lint import reporters

    for r in run.results:
        out.write(r.diff)
    n = sum(1 for r in run.results if r.diff)
    if not req.quiet:
        fixable = run.fixed
        print(f"Would fix {fixable} error{'s' * (fixable != 1)} in {n} file{'s' * (n != 1)}."
              if fixable else "No fixes available.", file=sys.stderr)
        if errors:
            print(reporters.unlinted(len(errors)), file=sys.stderr)
    return EXIT_OK if req.exit_zero else EXIT_ERRORS if errors else (EXIT_FINDINGS if n else EXIT_OK)


def _report(req: LintRequest, sel: Selection, run: LintRun, errors: list[FileError], out: IO[str],
            linted: bool) -> None:
    """The findings in the chosen format (text: with the summary unless ``--quiet``)."""
    from pitstop import __version__
    from pitstop.lint import reporters
    from pitstop.catalog import get

    findings = run.findings
    visible = reporters.shown(findings, sel.view)
    for r in run.results:
        if r.note:
            print(f"{r.filename}: {r.note}", file=sys.stderr)
    if req.format == "json":
        out.write(reporters.json_report(visible, errors))
    elif req.format == "sarif":
        table = [(c, get(c).slug, get(c).title) for c in sorted(sel.enabled)]
        out.write(reporters.sarif(visible, errors, table, __version__))
    elif req.format == "github":
        out.write(reporters.github(visible, errors))
    else:
        if req.statistics:
            out.write(reporters.statistics(visible, req.unsafe_fixes))
        else:
            out.write(reporters.text(visible, req.unsafe_fixes))
        if not req.quiet:
            out.write(reporters.summary(visible, run.fixed, req.unsafe_fixes, len(errors), len(findings) - len(visible))
                      if linted or errors else "0 files linted.\n")


def _exit_status(req: LintRequest, sel: Selection, run: LintRun, errors: list[FileError]) -> int:
    if errors and not req.exit_zero:
        return EXIT_ERRORS
    if req.exit_non_zero_on_fix and run.fixed:
        return EXIT_FINDINGS
    counted = [f for f in run.findings if sel.view.shows(f)]
    return EXIT_FINDINGS if counted and not req.exit_zero else EXIT_OK


def _write_report(path: Path, text: str) -> None:
    from pitstop.atomic import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise LintOutputError(f"-o/--output-file {path}: cannot write: {exc.strerror or exc}") from None


def display_path(p: Path) -> str:
    """``p`` relative to the working directory when it is below it, else as given."""
    try:
        rel = os.path.relpath(p)
    except ValueError:
        return str(p)
    return str(p) if rel.startswith("..") else rel
