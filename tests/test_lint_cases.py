"""The cases of issue 42, each a small project of our own code (written after reading the repositories named in
``tests/fixtures/lint/cases/README.md``, never copied), linted as a whole (the project index sees every file).

``tests/fixtures/lint/cases/<CODES>-<slug>/``: the rules named in the folder (``PIT302+PIT105-...``) report
exactly the lines marked ``# expect: PITnnn``; ``@freq`` after the code also checks the finding's frequency
(``step``, ``epoch``, ``once``, ``unknown``), and a ``+`` after it that the finding is not hidden as one-time
(wrong results, unsafe loads and deprecated calls are shown whatever their frequency). Every rule runs (the
default selection by measured precision is tests/test_lint_defaults.py's subject). Each case failed on the code
before issue 42 (see the README).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pitstop.lint.parallel import LintOptions, Task, run_tasks

from conftest import FIXTURES

CASES = sorted(p for p in (FIXTURES / "lint" / "cases").iterdir() if p.is_dir() and p.name != "__pycache__")
_EXPECT = re.compile(r"#\s*expect:\s*((?:PIT\d{3}(?:@\w+\+?)?)(?:\s*,\s*PIT\d{3}(?:@\w+\+?)?)*)")


def _files(case: Path) -> list[Path]:
    return sorted(p for p in case.rglob("*.py") if "__pycache__" not in p.parts)


def _expected(case: Path) -> set[tuple]:
    out = set()
    for path in _files(case):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = _EXPECT.search(line)
            if m:
                for item in re.split(r"\s*,\s*", m[1]):
                    code, _, freq = item.partition("@")
                    out.add((path.relative_to(case).as_posix(), lineno, code, freq))
    return out


def _found(case: Path, want: set[tuple]) -> set[tuple]:
    codes = tuple(case.name.split("-", 1)[0].split("+"))
    tasks = [Task(str(p), p.relative_to(case).as_posix(), codes) for p in _files(case)]
    run = run_tasks(tasks, LintOptions(jobs=1))
    assert not run.errors, run.errors
    wanted = {(p, ln, c): f for p, ln, c, f in want}
    out = set()
    for f in run.findings:
        freq = wanted.get((f.filename, f.line, f.code), "")
        if freq:  # the frequency, and "+" when a "+" was asked for and the finding is not hidden as one-time
            hidden = getattr(f, "hideable", f.frequency == "once")  # before issue 42 every one-time finding was
            freq = f.frequency + ("+" if freq.endswith("+") and not hidden else "")
        out.add((f.filename, f.line, f.code, freq))
    return out


def test_every_case_is_listed_and_marks_something():
    readme = (FIXTURES / "lint" / "cases" / "README.md").read_text(encoding="utf-8")
    assert len(CASES) >= 12
    for case in CASES:
        assert f"`{case.name}`" in readme, f"{case.name} is not described in cases/README.md"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_case_reports_exactly_the_marked_lines(case, monkeypatch):
    monkeypatch.chdir(case)
    want = _expected(case)
    assert _found(case, want) == want
    assert os.getcwd() == str(case)
