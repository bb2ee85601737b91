"""Real training scripts run unchanged under ``pitstop doctor`` (pinned copies under
``tests/lint_corpus/`` and ``tests/real_scripts/``, synthetic data written locally; see benchmarks/doctor_real_scripts.py):
the reported batch size, samples per step, step boundary and step times match the
script's own numbers, and no finding points the wrong way."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def _bench():
    spec = importlib.util.spec_from_file_location("doctor_real_scripts", ROOT / "benchmarks" / "doctor_real_scripts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["nanogpt", "wlm-lstm"])
def test_real_script_numbers_match_the_scripts_own(name):
    bench = _bench()
    r = bench.run_case(bench.CASES[name])
    assert r["failed"] == [], r
