"""Fixture-driven rule tests (as ruff and TorchFix do): adding a rule means adding files.

``tests/fixtures/lint/PITnnn/``:
- ``bad.py``: every expected finding of that rule is declared on its line with a trailing
  ``# expect: PITnnn`` comment (several codes comma-separated); nothing else may be reported.
- ``good.py``: the rule reports nothing.
- ``fix_in.py``/``fix_out.py``: safe fixes turn the first into the second;
  ``unsafe_fix_in.py``/``unsafe_fix_out.py``: the same with unsafe fixes enabled.
``tests/fixtures/lint/scripts/*.py``: realistic whole scripts linted with EVERY rule, the
findings declared the same way (a clean script declares none): precision, not just recall.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pitstop.lint.runner import all_rule_classes, fix_source, is_valid_python, lint_source, rules_for

from conftest import FIXTURES

LINT = FIXTURES / "lint"
RULE_DIRS = sorted(p for p in LINT.iterdir() if re.fullmatch(r"PIT\d{3}", p.name))
SCRIPTS = sorted((LINT / "scripts").glob("*.py"))
_EXPECT = re.compile(r"#\s*expect:\s*(PIT\d{3}(?:\s*,\s*PIT\d{3})*)")


def expected(path: Path) -> Counter:
    out: Counter = Counter()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            for code in re.split(r"\s*,\s*", m[1]):
                out[(lineno, code)] += 1
    return out


def found(path: Path, codes) -> Counter:
    return Counter((f.line, f.code) for f in lint_source(path.read_text(encoding="utf-8"), str(path), rules_for(codes)))


def test_every_lint_rule_has_fixtures():
    rules = all_rule_classes()
    assert {d.name for d in RULE_DIRS} == set(rules)
    for d in RULE_DIRS:
        assert (d / "bad.py").is_file() and (d / "good.py").is_file(), d
        fixes = {cls.fix for cls in rules[d.name]}
        if "safe" in fixes:
            assert (d / "fix_in.py").is_file(), f"{d.name} offers a safe fix: add fix_in.py/fix_out.py"
        if fixes & {"safe", "unsafe"}:
            assert (d / "fix_in.py").is_file() or (d / "unsafe_fix_in.py").is_file(), d.name


@pytest.mark.parametrize("rule_dir", RULE_DIRS, ids=lambda d: d.name)
def test_bad_reports_exactly_the_declared_findings(rule_dir):
    bad = rule_dir / "bad.py"
    want = expected(bad)
    assert want, f"{bad} declares no finding"
    assert found(bad, [rule_dir.name]) == want


@pytest.mark.parametrize("rule_dir", RULE_DIRS, ids=lambda d: d.name)
def test_good_reports_nothing(rule_dir):
    assert found(rule_dir / "good.py", [rule_dir.name]) == Counter()


FIX_CASES = [(d, prefix) for d in RULE_DIRS for prefix in ("", "unsafe_") if (d / f"{prefix}fix_in.py").is_file()]


@pytest.mark.parametrize("rule_dir,prefix", FIX_CASES, ids=lambda v: getattr(v, "name", v or "safe"))
def test_fix_turns_in_into_out_and_is_idempotent(rule_dir, prefix):
    src = (rule_dir / f"{prefix}fix_in.py").read_text(encoding="utf-8")
    want = (rule_dir / f"{prefix}fix_out.py").read_text(encoding="utf-8")
    rules = rules_for([rule_dir.name])
    unsafe = prefix == "unsafe_"
    if unsafe:  # the unsafe fixes are not applied without --unsafe-fixes
        assert fix_source(src, "in.py", rules, unsafe=False)[0] == src
    fixed, remaining, applied, note = fix_source(src, "in.py", rules, unsafe=unsafe)
    assert fixed == want
    assert applied > 0 and note == ""
    assert is_valid_python(fixed)
    assert fix_source(fixed, "out.py", rules, unsafe=unsafe)[0] == fixed  # idempotent


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_whole_scripts_with_every_rule(script):
    assert found(script, all_rule_classes()) == expected(script)


def test_findings_carry_positions_names_and_fix_edits():
    src = (LINT / "PIT106" / "fix_in.py").read_text(encoding="utf-8")
    f = lint_source(src, "x.py", rules_for(["PIT106"]))[0]
    assert (f.line, f.column, f.end_line) == (3, 5, 3) and f.end_column == len("a = torch.zeros(3, 4).cuda()") + 1
    assert f.name == "create-on-device" and f.fix.applicability == "safe"
    (edit,) = f.fix.edits
    assert src[edit.start:edit.end] == "torch.zeros(3, 4).cuda()" and edit.content == 'torch.zeros(3, 4, device="cuda")'
