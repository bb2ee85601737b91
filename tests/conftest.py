"""Shared test fixtures: paths, a CLI runner, and the TIPS.md spec snapshot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# tests/lint_corpus holds the corpus manifest and labels only (the code is built outside the repository)
collect_ignore = ["lint_corpus"]


@dataclass(frozen=True)
class SpecRow:
    code: str
    slug: str
    faces: str
    seeds: str
    truth: str


def parse_tips_spec(path: Path = FIXTURES / "TIPS.md") -> list[SpecRow]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*(PIT\d{3})\s*\|\s*([a-z0-9-]+)\s*\|\s*([A-Z ]+)\s*\|[^|]*\|\s*([^|]*)\|\s*([^|]*)\|", line)
        if m:
            rows.append(SpecRow(m[1], m[2], m[3].replace(" ", ""), m[4].strip(), m[5].strip()))
    return rows


@pytest.fixture(scope="session")
def spec() -> list[SpecRow]:
    rows = parse_tips_spec()
    assert len(rows) >= 40, "the TIPS.md snapshot no longer parses"
    return rows


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> Result:
    """Run ``python -m pitstop ARGS`` in a subprocess (the real entry point, real exit code)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "pitstop", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=full_env)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli
