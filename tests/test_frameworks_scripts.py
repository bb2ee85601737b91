"""Frameworks (issue 12) on the real installs: ``pitstop doctor`` and ``pitstop tune`` run the
fixture scripts under ``tests/fixtures/frameworks/`` unchanged (CPU, tiny models built from
configs, synthetic data, nothing downloaded). One doctor run per script and setting is
shared by its assertions; doctor runs are forked from the test process's warm worker
(``tests/doctor_warm.py``), tune runs go through the CLI. Skipped only where a framework cannot be imported."""

from __future__ import annotations

import importlib.util
import json

import jsonschema
import pytest

from conftest import FIXTURES, ROOT, run_cli

pytestmark = pytest.mark.slow

SCRIPTS = FIXTURES / "frameworks"
SCHEMA = json.loads((ROOT / "docs" / "doctor-schema.json").read_text(encoding="utf-8"))
NEEDS = {"lightning_cnn": "lightning", "fabric_loop": "lightning", "hf_trainer": "transformers",
         "hf_trainer_rows": "transformers",
         "accelerate_loop": "accelerate", "lbfgs_loop": None}


def _needs(script: str) -> None:
    pkg = NEEDS[script]
    if pkg and importlib.util.find_spec(pkg) is None:
        pytest.skip(f"{pkg} is not importable")
    if script in ("hf_trainer", "hf_trainer_rows", "accelerate_loop") and importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not importable")


_CACHE: dict[tuple, dict] = {}


def doctor(warm_doctor, script: str, *script_args: str, probes: bool = False) -> dict:
    key = (script, script_args, probes)
    if key not in _CACHE:
        _needs(script)
        run = warm_doctor.report(SCRIPTS / f"{script}.py", "--steps", "12", *script_args, steps=3, warmup=1,
                                 probes=probes)
        assert run.exit_code == 0, run.stderr[-3000:]
        jsonschema.validate(run.data, SCHEMA)
        assert run.data["check_errors"] == [], run.data["check_errors"]  # no crashed check or probe
        _CACHE[key] = run.data
    return _CACHE[key]


def _measured_share(d: dict) -> float:
    return sum(v["share"] for k, v in d["breakdown"].items() if k != "other")


@pytest.mark.parametrize("script, args, name, driver", [
    ("lightning_cnn", (), "lightning", "Trainer"),
    ("fabric_loop", (), "fabric", "Fabric"),
    ("hf_trainer", ("--bf16",), "transformers", "Trainer"),
    ("accelerate_loop", ("--mixed-precision", "bf16"), "accelerate", "AcceleratedOptimizer"),
    ("lbfgs_loop", (), None, None),
])
def test_doctor_detects_the_framework_and_its_breakdown_is_one_step(script, args, name, driver, warm_doctor):
    d = doctor(warm_doctor, script, *args, probes=script in ("lightning_cnn", "fabric_loop"))
    assert d["framework"]["name"] == name
    if driver:
        assert driver in d["framework"]["driver"]
    # phases are disjoint: under Lightning's closure and LBFGS forward/backward are not optimizer time
    assert _measured_share(d) <= 1.02, d["breakdown"]
    assert d["breakdown"]["forward"]["share"] > 0 and d["breakdown"]["backward"]["share"] > 0


def test_hf_trainer_with_dict_rows_and_default_data_collator_has_a_batch_size(warm_doctor):
    # batches are dicts of input_ids / attention_mask / labels: the batch dimension is their dim 0
    d = doctor(warm_doctor, "hf_trainer_rows")
    assert d["throughput"]["batch_size"] == 8 and d["throughput"]["batch_dim"] == 0
    assert d["observations"]["batch"]["input"] == "input_ids" and d["observations"]["batch"]["tokens_per_step"] == 256


def test_lightning_optimizer_is_not_the_top_finding_and_syncs_point_at_self_log(warm_doctor):
    d = doctor(warm_doctor, "lightning_cnn", probes=True)
    assert d["breakdown"]["optimizer"]["share"] < 0.2
    assert not any(f["code"] == "PIT501" and f["severity"] == "high" for f in d["findings"])
    line = next(i for i, t in enumerate((SCRIPTS / "lightning_cnn.py").read_text().splitlines(), 1) if "self.log(" in t)
    sync = next(f for f in d["findings"] if f["code"] == "PIT201")
    assert any(w.endswith(f"lightning_cnn.py:{line}") for w in sync["where"]), sync["where"]
    assert sync["fix"].startswith("Lightning Trainer:") and "prog_bar=False" in sync["fix"]
    assert "site-packages" not in json.dumps(d["syncs"])


def test_hf_trainer_sites_name_the_library_line_that_costs_via_the_user_s_train_call(warm_doctor):
    """The user's only line in the loop is ``Trainer(...).train()``: a sync the Trainer makes, and
    the lines the main thread ran between the phases, are named in transformers/accelerate, with
    the ``train()`` line as ``via`` (the same run as the framework test above)."""
    d = doctor(warm_doctor, "hf_trainer", "--bf16")
    call = next(i for i, t in enumerate((SCRIPTS / "hf_trainer.py").read_text().splitlines(), 1) if ".train()" in t)
    obs = d["observations"]
    named = [s for s in obs["syncs"] + obs["host_sites"] + obs["other_sites"] if s.get("via")]
    assert named, obs
    for s in named:
        assert s["via"].endswith(f"hf_trainer.py:{call}"), s
        assert "site-packages" in s["where"] and ("transformers" in s["where"] or "accelerate" in s["where"]), s


@pytest.mark.parametrize("script, args, configured", [
    ("lightning_cnn", ("--precision", "bf16-mixed"), {"precision": "bf16-mixed"}),
    ("fabric_loop", ("--precision", "bf16-mixed"), {"precision": "bf16-mixed"}),
    ("hf_trainer", ("--bf16",), {"bf16": True}),
    ("accelerate_loop", ("--mixed-precision", "bf16"), {"mixed_precision": "bf16"}),
])
def test_framework_bf16_is_recognised_from_what_ran(script, args, configured, warm_doctor):
    d = doctor(warm_doctor, script, *args)
    assert d["precision"]["autocast"] == "bfloat16", d["precision"]
    assert configured.items() <= d["framework"]["configured"].items()
    assert not any(f["code"] == "PIT301" for f in d["findings"])  # no fp32 advice to a bf16 run


def test_precision_probe_runs_under_fabric(warm_doctor):
    d = doctor(warm_doctor, "fabric_loop", probes=True)
    probe = d["probes"]["precision"]
    assert "error" not in probe and "skipped" not in probe, probe
    assert "Sequential" in probe["what"]  # the user's module, not Fabric's wrapper


@pytest.mark.parametrize("script, framework", [
    ("lightning_cnn", "lightning"), ("fabric_loop", "fabric"), ("hf_trainer", "transformers"),
    ("accelerate_loop", "accelerate"),
])
def test_tune_runs_the_precision_knob_through_each_framework(script, framework):
    _needs(script)
    out = run_cli("tune", "--format", "json", "--only", "PIT301", "--steps", "3", "--warmup", "1", "--repeats", "2", "--max-pairs", "2",
                  "--progress", "off", str(SCRIPTS / f"{script}.py"), "--", "--steps", "12", timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    d = json.loads(out.stdout)
    assert d["context"]["framework"] == framework
    trials = [t for t in d["trials"] if t["knobs"] and t["knobs"][0]["code"] == "PIT301"]
    assert trials and all(t["status"] != "failed" for t in trials), [(t["status"], t["reason"]) for t in trials]
