"""Planted hand-written loops under the doctor: each script in ``tests/fixtures/doctor/`` plants
one problem or one fact, and the report must name it as the top finding or get the fact right
(issue 15). Runs are forked from the test process's warm worker (``tests/doctor_warm.py``); the
report is the one ``pitstop doctor --format json`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

FIXTURES = ROOT / "tests" / "fixtures" / "doctor"
SCHEMA = json.loads((ROOT / "docs" / "doctor-schema.json").read_text(encoding="utf-8"))


def _doctor(warm_doctor, name: str, *, probes: bool = True, steps: int = 4) -> dict:
    run = warm_doctor.report(FIXTURES / f"{name}.py", steps=steps, warmup=1, probes=probes, timeout=240)
    assert run.exit_code == 0, run.stderr[-3000:]
    jsonschema.validate(run.data, SCHEMA)
    assert run.data["check_errors"] == []
    return run.data


def _line(name: str, needle: str) -> str:
    path = FIXTURES / f"{name}.py"
    n = next(i for i, t in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in t)
    return f"{path}:{n}"


def test_eval_with_autograd_in_train_mode_is_the_top_finding(warm_doctor):
    d = _doctor(warm_doctor, "eval_with_grad", probes=False)
    assert d["findings"][0]["code"] == "PIT803"
    assert "PIT605" in {f["code"] for f in d["findings"]}
    assert d["breakdown"]["eval"]["share"] > d["breakdown"]["forward"]["share"]  # 512-sample eval vs 32 train
    assert d["findings"][0]["where"] == [_line("eval_with_grad", "val_loss =")]


def test_io_bound_dataset_makes_pit101_the_top_finding(warm_doctor):
    d = _doctor(warm_doctor, "slow_dataset", probes=False)
    top = d["findings"][0]
    assert top["code"] == "PIT101" and top["severity"] == "high" and "mostly idle" in top["evidence"]


def test_batches_prepared_outside_a_dataloader_are_host_time_with_their_line(warm_doctor):
    d = _doctor(warm_doctor, "host_batches", probes=False)
    assert d["breakdown"]["host"]["share"] > 0.05
    top = d["findings"][0]
    assert top["code"] == "PIT101" and "Host work" in top["title"]
    heavy = _line("host_batches", "        x = torch.stack(")
    assert d["observations"]["host_sites"][0]["where"] == heavy and heavy in top["evidence"]


def test_conv_bias_before_batchnorm_is_found_through_dataparallel(warm_doctor):
    d = _doctor(warm_doctor, "wrapped_conv_bn", probes=False)
    assert "PIT603" in {f["code"] for f in d["findings"]}


def test_sequence_first_batch_and_tokens_and_the_probe_slices_the_batch_dim(warm_doctor):
    d = _doctor(warm_doctor, "seq_first")
    tp = d["throughput"]
    assert (tp["batch_size"], tp["batch_dim"]) == (20, 1)
    assert tp["tokens_per_s"] == pytest.approx(700 * tp["steps_per_s"])
    what = d["probes"]["precision"].get("what", "")
    assert "error" not in d["probes"]["precision"]
    assert not what or "35x" in what  # seq_len kept whole, batch cut


def test_manual_updates_end_steps_at_backward_calls_without_waiting_for_the_timeout(warm_doctor):
    d = _doctor(warm_doctor, "manual_update", probes=False)
    assert d["outcome"] == "diagnosed" and d["steps"]["observed"] == 4
    assert d["throughput"]["step_boundary"] == "backward"
    assert any("manual update" in n for n in d["notes"])


def test_accumulation_counts_every_micro_batch(warm_doctor):
    d = _doctor(warm_doctor, "accumulation", probes=False)
    assert d["throughput"]["samples_per_step"] == 32 and d["throughput"]["micro_batches_per_step"] == 4


def test_keyword_batches_get_throughput_and_probes(warm_doctor):
    d = _doctor(warm_doctor, "dict_batch")
    assert d["throughput"]["batch_size"] == 6 and d["observations"]["batch"]["tokens"] == 288
    assert "speedup" in d["probes"]["precision"]


def test_oversubscribed_workers_are_never_told_to_add_workers(warm_doctor):
    d = _doctor(warm_doctor, "busy_workers", probes=False, steps=6)
    for f in d["findings"]:
        assert "more workers" not in f["fix"].lower(), f
    assert d["observations"]["cpu"]["workers"] >= 2
