"""Lint many files: discovery results in, :class:`LintRun` out, in parallel across cores.

Workers are forked processes (``concurrent.futures.ProcessPoolExecutor``) that inherit the
loaded rule registry. If a worker dies (a native crash on some input), the files of its
batch are re-run one per fresh process, so the culprit is reported as an error and every
other file is still linted.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from pitstop.lint.findings import FileError, FileResult, LintFinding
from pitstop.lint.notebook import is_notebook, lint_notebook_file
from pitstop.lint.index.project import ProjectIndex, index_for, index_signature
from pitstop.lint.runner import DEFAULT_MAX_FILE_SIZE, all_rule_classes, lint_file
from pitstop.lint.view import EVERYTHING, View
from pitstop.machine import usable_cores

__all__ = ["Task", "LintOptions", "LintRun", "run_tasks"]


@dataclass(frozen=True)
class Task:
    path: str
    display: str
    codes: tuple[str, ...]
    may_write: bool = True  # False: a symlink out of the linted folder; --fix leaves it alone


@dataclass(frozen=True)
class LintOptions:
    fix: bool = False
    unsafe: bool = False
    diff: bool = False
    max_size: int = DEFAULT_MAX_FILE_SIZE
    jobs: int = 0  # 0: one per core
    view: View = EVERYTHING  # what the run keeps, shows and fixes (pitstop.lint.view)


@dataclass
class LintRun:
    results: list[FileResult] = field(default_factory=list)

    @property
    def findings(self) -> list[LintFinding]:
        return sorted((f for r in self.results for f in r.findings), key=LintFinding.sort_key)

    @property
    def errors(self) -> list[FileError]:
        return [r.error for r in self.results if r.error is not None]

    @property
    def fixed(self) -> int:
        return sum(r.fixed for r in self.results)


def _one(task: Task, opts: LintOptions, project: ProjectIndex | None = None) -> FileResult:
    lint = lint_notebook_file if is_notebook(task.path) else lint_file
    result = lint(task.path, task.display, task.codes, fix=opts.fix and task.may_write, unsafe=opts.unsafe,
                  diff=opts.diff, max_size=opts.max_size, project=project, view=opts.view)
    if opts.fix and not task.may_write and any(f.fix is not None for f in result.findings):
        result.note = ("not fixed: a symbolic link to a file outside the linted folder (run `pitstop lint --fix` on "
                       "the file it points to)")
    return result


def _batch(tasks: list[Task], opts: LintOptions, signature: tuple) -> list[FileResult]:
    project = index_for(signature)  # cached: a forked worker finds the parent's index
    return [_one(t, opts, project) for t in tasks]


def _context():
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def run_tasks(tasks: list[Task], opts: LintOptions) -> LintRun:
    all_rule_classes()  # load the catalog once, before forking
    signature = index_signature(t.path for t in tasks)
    project = index_for(signature)  # the first pass: what every linted file defines and calls
    jobs = opts.jobs or usable_cores()
    jobs = min(jobs, len(tasks))
    if jobs <= 1 or len(tasks) < 4:
        return LintRun([_one(t, opts, project) for t in tasks])
    size = max(1, min(32, len(tasks) // (jobs * 4)))
    batches = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    results: list[FileResult] = []
    failed: list[Task] = []
    with ProcessPoolExecutor(jobs, mp_context=_context()) as pool:
        futures = {pool.submit(_batch, b, opts, signature): b for b in batches}
        for fut in as_completed(futures):
            try:
                results.extend(fut.result())
            except BrokenProcessPool:
                failed.extend(futures[fut])
    for task in failed:  # isolate: one fresh process per file
        try:
            with ProcessPoolExecutor(1, mp_context=_context()) as pool:
                results.extend(pool.submit(_batch, [task], opts, signature).result())
        except BrokenProcessPool:
            results.append(FileResult(task.display, error=FileError(
                task.display, "the linter process crashed on this file (nested too deeply for the parser?)")))
    order = {t.display: i for i, t in enumerate(tasks)}
    results.sort(key=lambda r: order.get(r.filename, 0))
    return LintRun(results)
