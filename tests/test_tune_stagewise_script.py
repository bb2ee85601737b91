"""The stagewise search on a real script (tests/fixtures/tune/stagewise_train.py): an input
pipeline bound by I/O latency in front of a device-like compute step; workers hide the latency,
then halving the compute pays. The path holds both; alone, the compute trick gives nothing."""

from __future__ import annotations

import sys

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow
pytest.importorskip("pitstop.doctor.run.runner", reason="script mode runs on pitstop doctor's child-process runner")

TUNE = FIXTURES / "tune"
sys.path.insert(0, str(TUNE))
import planted_knobs as planted  # noqa: E402


@pytest.fixture(scope="module")
def path_result(warm_doctor):
    from pitstop.tune.api import tune_script

    knobs = [planted.IOWorkersKnob(), planted.HalvePaceKnob()]
    return tune_script(str(TUNE / "stagewise_train.py"), steps=6, warmup=3, repeats=3, max_pairs=5, timeout=60,
                       threads=1, knobs=knobs, worker=warm_doctor.runner)


def test_the_path_holds_both_tricks_and_the_second_only_pays_on_top_of_the_first(path_result):
    r = path_result
    workers, halve = r.trial("num_workers=4"), r.trial("halve-pace")
    assert workers.status == "kept", workers.reason
    assert halve.status != "kept", halve.reason  # the batches arrive slower than the compute: hidden
    assert [s.trick for s in r.stages] == ["num_workers=4", "halve-pace"], [c.to_dict() for c in r.combination]
    second = r.stages[1]
    assert second.speed.low > 1 + r.settings.options.margin  # decided faster on top of the workers
    assert second.cumulative > r.stages[0].cumulative
    assert r.best is not None and {s.knob for s in r.best.settings} == {"workers", "halve-pace"}
    assert r.best.speed.status == "faster" and r.best.loss_check.passed
    d = r.to_dict()
    assert [s["trick"] for s in d["stages"]] == ["num_workers=4", "halve-pace"]
    assert d["best"]["recipe"]["num_workers"] == 4 and "num_workers=4" in d["best"]["snippet"]


@pytest.mark.parametrize("warm", [True, False], ids=["warm-worker", "fresh-process"])
def test_a_run_whose_script_does_not_exit_is_stopped_and_keeps_its_measurement(warm):
    import time

    from pitstop.doctor.run.runner import EXIT_GRACE_S
    from pitstop.tune.script import ScriptBackend

    backend = ScriptBackend(str(TUNE / "lingering_train.py"), warm=warm, threads=1)
    try:
        started = time.monotonic()
        run = backend.run((), [], steps=4, warmup=1, timeout=120)
        took = time.monotonic() - started
    finally:
        backend.close()
    assert run.ok and len(run.step_times) == 4, (run.status, run.message)
    assert took < 120 / 2  # stopped after its report, long before the timeout
    if not warm:  # a fresh process lingers until stopped EXIT_GRACE_S after its report; a warm worker's
        assert took >= EXIT_GRACE_S  # fork ends with os._exit once its report is written (no thread can hold it)
