"""Precision and recall patterns of `pitstop lint`, in fixtures written for this project.

``tests/fixtures/lint/patterns/<CODES>-<slug>/`` holds one pair per pattern a rule was fixed
for (false positives found on real code, and misses), in our own words and code (the real
code they came from is only in the external corpus, see benchmarks/lint_corpus_build.py):

- ``bad.py``: the rule(s) named in the folder (``PIT101+PIT102-...``) report exactly the
  lines marked ``# expect: PITnnn`` (the nearby case the rule must still catch);
- ``good.py``: the same rule(s) report nothing (the pattern a rule once got wrong or the
  fixed form of a miss).

The folder list with where each pattern came from is ``patterns/README.md``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pitstop.lint.runner import lint_source, rules_for

from conftest import FIXTURES

PATTERNS = sorted(p for p in (FIXTURES / "lint" / "patterns").iterdir() if p.is_dir())
_EXPECT = re.compile(r"#\s*expect:\s*(PIT\d{3}(?:\s*,\s*PIT\d{3})*)")


def _codes(folder: Path) -> list[str]:
    return folder.name.split("-", 1)[0].split("+")


def _expected(path: Path) -> Counter:
    out: Counter = Counter()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            out.update((lineno, c) for c in re.split(r"\s*,\s*", m[1]))
    return out


def _found(path: Path, codes: list[str]) -> Counter:
    return Counter((f.line, f.code) for f in lint_source(path.read_text(encoding="utf-8"), path.name, rules_for(codes)))


def test_every_pattern_is_a_pair_and_listed():
    readme = (FIXTURES / "lint" / "patterns" / "README.md").read_text(encoding="utf-8")
    assert len(PATTERNS) >= 30
    for p in PATTERNS:
        assert (p / "bad.py").is_file() and (p / "good.py").is_file(), p.name
        assert f"`{p.name}`" in readme, f"{p.name} is not described in patterns/README.md"


@pytest.mark.parametrize("folder", PATTERNS, ids=lambda p: p.name)
def test_bad_reports_exactly_the_marked_lines(folder):
    want = _expected(folder / "bad.py")
    assert want, "bad.py marks no finding"
    assert _found(folder / "bad.py", _codes(folder)) == want


@pytest.mark.parametrize("folder", PATTERNS, ids=lambda p: p.name)
def test_good_reports_nothing(folder):
    assert _found(folder / "good.py", _codes(folder)) == Counter()


def test_messages_say_what_the_file_pins_down():
    """Issue 24: PIT102 does not promise overlap without non_blocking; PIT502 claims the 0.01
    default only when weight_decay is not passed; argparse-based findings name the option."""
    folder = FIXTURES / "lint" / "patterns"
    by_code = {}
    for name in ("PIT102-items-on-gpu", "PIT502-passed-weight-decay", "PIT101-argparse-workers"):
        src = (folder / name / "bad.py").read_text(encoding="utf-8")
        for f in lint_source(src, "bad.py", rules_for(_codes(folder / name))):
            by_code[f.code] = f.message
    assert "non_blocking=True" in by_code["PIT102"] and "only when" in by_code["PIT102"]
    assert "default weight_decay" not in by_code["PIT502"] and "--wd defaults to 0.05" in by_code["PIT502"]
    assert "--dataloader_num_workers defaults to 0" in by_code["PIT101"]


def test_argparse_defaults_follow_dest_and_give_up_on_conflicts():
    """``dest=`` and ``--a-b`` -> ``a_b`` name the attribute; two parsers that disagree on a default
    make the value unknown (no finding), as does an option without a literal default."""
    src = '''
import argparse
from torch.utils.data import DataLoader
p = argparse.ArgumentParser()
p.add_argument("--data-workers", type=int, default=0)
p.add_argument("-j", dest="jobs", type=int, default=0)
p.add_argument("--other", type=int, default=0)
q = argparse.ArgumentParser()
q.add_argument("--other", type=int, default=4)
p.add_argument("--computed", type=int, default=len([1, 2]))
args = p.parse_args()
a = DataLoader(files, batch_size=8, shuffle=True, num_workers=args.data_workers)
b = DataLoader(files, batch_size=8, shuffle=True, num_workers=args.jobs)
c = DataLoader(files, batch_size=8, shuffle=True, num_workers=args.other)
d = DataLoader(files, batch_size=8, shuffle=True, num_workers=args.computed)
'''
    lines = sorted(f.line for f in lint_source(src, "train.py", rules_for(["PIT101"])))
    assert lines == [12, 13]
