"""Real training scripts run unchanged under ``pitstop doctor`` (files of the lint corpus, built outside
the repository by ``benchmarks/lint_corpus_build.py``; skipped when it is not built; synthetic data
written locally; see benchmarks/doctor_real_scripts.py):
the reported batch size, samples per step, step boundary and step times match the
script's own numbers, and no finding points the wrong way."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT

_build_spec = importlib.util.spec_from_file_location("lint_corpus_build", ROOT / "benchmarks" / "lint_corpus_build.py")
_build = importlib.util.module_from_spec(_build_spec)
sys.modules.setdefault("lint_corpus_build", _build)
_build_spec.loader.exec_module(_build)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not _build.is_built(), reason=_build.skip_reason())]


def _bench():
    spec = importlib.util.spec_from_file_location("doctor_real_scripts", ROOT / "benchmarks" / "doctor_real_scripts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["nanogpt", "wlm-lstm"])
def test_real_script_numbers_match_the_scripts_own(name):
    bench = _bench()
    # The band catches a step boundary off by a factor of two (0.5x or 2x). It is wider than the
    # benchmark's 0.8-1.25 because these steps last a few ms on this CPU: the script's own timer
    # also counts the doctor's per-step recording, a larger share when other work shares the
    # cores (0.79x was seen once in the whole suite on the 2-core AMD EPYC).
    r = bench.run_case(bench.CASES[name], band=(2 / 3, 1.5))
    assert r["failed"] == [], r
