"""The warm worker (torch imported once, one fork per run) behaves like a fresh process."""

from __future__ import annotations

import io
import sys

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow

TUNE = FIXTURES / "tune"
sys.path.insert(0, str(TUNE))
import planted_knobs as planted  # noqa: E402


def test_a_forked_run_trains_exactly_like_a_fresh_process(warm_doctor):
    from pitstop.tune.script import ScriptBackend
    from pitstop.tune.warm import WarmRunner

    if not WarmRunner.available():
        pytest.skip("no fork on this platform")
    shared = warm_doctor.runner  # a worker the caller owns (the suite's), as several searches share one
    shared.start()
    shared_pid = shared.proc.pid
    runs = {}
    # two forks of the search's own warm worker (the second must not inherit anything from the
    # first), one of the shared worker, one fresh process to compare them with (a second fresh run
    # would only repeat the first: ~3 s CPU)
    for kind, n in (("own", 2), ("shared", 1), ("fresh", 1)):
        backend = ScriptBackend(str(TUNE / "tiny_train.py"), threads=1, warm=kind != "fresh",
                                worker=shared if kind == "shared" else None)
        try:
            runs[kind] = [backend.run((), [], steps=4, warmup=1, timeout=60) for _ in range(n)]
        finally:
            backend.close()
        assert backend.worker_kind.startswith("a fresh" if kind == "fresh" else "warm")
        assert ("shared" in backend.worker_kind) == (kind == "shared")
        if kind == "shared":  # the runs' OpenMP policy is the one the worker started with
            assert bool(backend.passive_omp) == ((shared.omp_wait_policy or "").upper() == "PASSIVE")
    for kind, done in runs.items():
        assert all(r.ok for r in done), (kind, [r.message for r in done])
    assert runs["own"][0].losses == runs["own"][1].losses == runs["shared"][0].losses == runs["fresh"][0].losses
    assert all(len(r.cpu_times) == len(r.step_times) == 4 for r in runs["own"] + runs["shared"])
    assert shared.proc.pid == shared_pid and shared.proc.poll() is None  # the caller's worker: left running


def test_the_scripts_repeated_stderr_is_counted_not_printed():
    from pitstop.report.tune_terminal import render_text
    from pitstop.tune.api import tune_script

    r = tune_script(str(TUNE / "tiny_train.py"), args=("--warn", "--pace", "20"), steps=4, warmup=1, repeats=2,
                    max_pairs=2, timeout=60, threads=1, knobs=[planted.SkipPaceKnob()])
    w = r.script_warnings
    assert w is not None and w.distinct == 1 and w.lines >= 5 * (len(r.baseline.runs) + 1)
    buf = io.StringIO()
    render_text(r, file=buf)
    text = buf.getvalue()
    assert text.count("a repeated warning") == 1 and f"{w.lines} lines to stderr" in text
    assert r.time is not None and r.time.runs >= 3 and "warm worker" in r.time.worker
    assert "set-up and shutdown" in text and "measured steps" in text
