"""pitstop doctor on the bundled examples: the planted problems are found, the clean twin is clean.

One doctor run per example is shared by all the assertions about it (module-scoped fixtures):
the naive CNN (the README's main job, with ``--html``) through the CLI; its clean twin, the GPT and
the MLP forked from the test process's warm worker (``tests/doctor_warm.py``). Runs
are short (``--steps 3 --warmup 1``) and evaluate every 2 steps so that the evaluation
code paths run inside the observed steps.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

SCHEMA = json.loads((ROOT / "docs" / "doctor-schema.json").read_text(encoding="utf-8"))


def _doctor(tmp: Path, module: str, *script_args: str) -> tuple[dict, Path]:
    html = tmp / f"{module.rsplit('.', 1)[-1]}.html"
    args = ["doctor", "--format", "json", "--html", str(html), "--steps", "3", "--warmup", "1", "-m", module]
    out = run_cli(*args, "--", "--eval-every", "2", *script_args, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    d = json.loads(out.stdout)
    assert d["check_errors"] == []  # a crashing check or probe would hide its findings
    return d, html


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    # twice the default blur work per sample: the data share is then ~10% of the step here (2-core
    # AMD EPYC), not ~6.6%, which a loaded machine pushed under PIT101's 5% gate (4.1% seen)
    return _doctor(tmp_path_factory.mktemp("cnn"), "pitstop.examples.cnn", "--work", "12")


def _warm(warm_doctor, module: str, *script_args: str, probes: bool = False) -> dict:
    """The same run forked from the warm worker (``tests/doctor_warm.py``)."""
    run = warm_doctor.report(None, "--eval-every", "2", *script_args, module=module, steps=3, warmup=1, probes=probes,
                             timeout=400)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.data["check_errors"] == []
    return run.data


@pytest.fixture(scope="module")
def gpt(warm_doctor):
    return _warm(warm_doctor, "pitstop.examples.gpt", "--batch-size", "8")


@pytest.fixture(scope="module")
def mlp(warm_doctor):
    return _warm(warm_doctor, "pitstop.examples.mlp")


@pytest.fixture(scope="module")
def clean(warm_doctor):
    return _warm(warm_doctor, "pitstop.examples.cnn_clean", probes=True)


def source_line(module: str, needle: str) -> int:
    """Line number of the first line of ``pitstop/examples/<module>.py`` containing ``needle``."""
    path = ROOT / "src" / "pitstop" / "examples" / f"{module}.py"
    return next(i for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if needle in text)


def codes(d: dict) -> set[str]:
    return {f["code"] for f in d["findings"]}


def finding(d: dict, code: str) -> dict:
    return next(f for f in d["findings"] if f["code"] == code)


def test_json_report_follows_the_documented_schema(cnn, clean):
    for d in (cnn[0], clean):
        jsonschema.validate(d, SCHEMA)


def test_naive_cnn_measures_steps_breakdown_and_throughput(cnn):
    d, _ = cnn
    assert d["outcome"] == "diagnosed" and d["status"] == "stopped"
    assert d["steps"]["observed"] == 3
    kinds = [r["kind"] for r in d["steps"]["records"]]
    assert kinds == ["warmup", "observed", "observed", "observed", "bare", "profiled"]  # bare: the doctor's overhead
    o = d["observations"]["overhead"]
    assert o["pairs"] == 1 and o["observed"] == d["steps"]["records"][3]["wall"] and o["bare"] > 0
    shares = sum(v["share"] for v in d["breakdown"].values())
    assert shares == pytest.approx(1.0, abs=0.02)
    assert d["step_time"]["p90"] >= d["step_time"]["median"] > 0
    assert d["throughput"]["batch_size"] == 64
    assert d["throughput"]["samples_per_s"] == pytest.approx(64 * d["throughput"]["steps_per_s"])
    assert d["flops"]["per_step"] > 1e9 and d["flops"]["mfu"] is None  # CPU: MFU n/a


def test_naive_cnn_planted_problems_are_found(cnn):
    d, _ = cnn
    found = codes(d)
    # PIT101: the data-heavy loader with num_workers=0 (data wait > 5% of the step)
    assert d["breakdown"]["data"]["share"] > 0.05
    assert "PIT101" in found and "num_workers=0" in finding(d, "PIT101")["evidence"]
    # PIT201: loss.item() every step, at the line that calls it
    assert d["syncs_per_step"] >= 1
    line = source_line("cnn", "loss.item()")
    assert any(w.endswith(f"examples/cnn.py:{line}") for w in finding(d, "PIT201")["where"])
    # PIT202: losses.append(loss) keeps every step's loss and graph alive
    assert "PIT202" in found and d["observations"]["graph"]["live_losses"] >= 2
    # PIT603: conv bias before BatchNorm, found from the data flow
    assert "features.0 -> features.1" in finding(d, "PIT603")["evidence"]
    # PIT605: evaluation under no_grad (the script calls model.eval(), so no PIT803)
    assert "PIT605" in found and "PIT803" not in found


def test_naive_cnn_recommendations_follow_the_probes(cnn):
    """PIT501 / PIT301 / PIT104 are recommended exactly when the lower bound of this machine's
    probe interval clears the gate (a ratio of medians alone is not enough)."""
    d, _ = cnn
    th = 1.10
    opt = d["observations"]["optimizers"][0]
    assert opt["class"] == "SGD" and opt["mode"] == "for-loop"
    for key, code in (("optimizer", "PIT501"), ("precision", "PIT301"), ("channels_last", "PIT104")):
        p = d["probes"][key]
        if "skipped" in p:
            # a probe whose rounds cannot fit its share of the observed steps' time (a loaded
            # machine makes the 3 observed steps' calls slow) is not run, says so, and recommends nothing
            assert "share of the probes' time" in p["skipped"] or "ran out of time" in p["skipped"], (key, p)
            assert code not in codes(d), key
            continue
        assert p["compute_only"] and p["runs"] >= 3, key  # rounds stop once decided, after at least 3
        best = p["speedups"][p["candidate"]]
        assert best["low"] <= best["ratio"] <= best["high"], key
        assert p["interval"] == [best["low"], best["high"]] and p["speedup"] == best["ratio"], key
        assert (code in codes(d)) == (best["low"] >= th), key
        if code in codes(d):
            assert "pitstop tune" in finding(d, code)["evidence"]
    ran = [key for key in ("optimizer", "precision", "channels_last") if "skipped" not in d["probes"][key]]
    if "optimizer" in ran:
        assert d["probes"]["optimizer"]["baseline"] == "for-loop"
        assert set(d["probes"]["optimizer"]["seconds"]) >= {"for-loop", "foreach"}
    if "precision" in ran:
        assert d["probes"]["precision"]["baseline"] == "fp32" and d["probes"]["precision"]["dtype"] == "bfloat16"


def test_findings_are_ranked_and_actionable(cnn):
    d, _ = cnn
    order = {"high": 0, "medium": 1, "low": 2}
    keys = [(order[f["severity"]], -(f["impact"]["share"] or 0)) for f in d["findings"]]
    assert keys == sorted(keys)
    for f in d["findings"]:
        assert f["explain"] == f"pitstop explain {f['code']}" and f["explain"] in f["fix"]
        assert re.search(r"\d", f["evidence"]), f"{f['code']}: evidence without a number: {f['evidence']}"


def test_cpu_run_says_which_checks_were_skipped(cnn):
    skipped = {s["code"]: s["reason"] for s in cnn[0]["skipped_checks"]}
    for code in ("PIT102", "PIT103", "PIT304", "PIT602", "PIT604"):
        assert "CUDA" in skipped[code]


def test_memory_breakdown_is_measured(cnn):
    m = cnn[0]["memory"]
    # SGD with momentum keeps one buffer per parameter: state == params (PIT402's rule)
    assert m["params"] > 0 and m["grads"] == m["params"] and m["optimizer_state"] == m["params"]
    assert m["activations"] > m["params"]  # a conv net saves far more than its weights
    assert m["peak"] > 0 and m["peak_source"] == "process peak RSS"


def test_naive_gpt_planted_problems_are_found(gpt):
    found = codes(gpt)
    assert {"PIT803", "PIT605", "PIT502", "PIT202", "PIT201"} <= found
    line = source_line("gpt", "logits = model(idx)")  # the first one: in validate()
    assert any(w.endswith(f"examples/gpt.py:{line}") for w in finding(gpt, "PIT803")["where"])
    assert finding(gpt, "PIT803")["severity"] == "high"
    assert gpt["observations"]["optimizers"][0]["decay_1d_params"] > 0


def test_naive_mlp_planted_problems_are_found(mlp):
    found = codes(mlp)
    assert {"PIT606", "PIT202", "PIT201", "PIT605"} <= found
    assert "net.2 -> net.3" in finding(mlp, "PIT606")["evidence"]


def test_clean_variant_has_no_high_impact_findings(clean):
    assert clean["outcome"] == "diagnosed"
    # PIT108 is the machine's, not the script's: beside the suite's other workers its threads may well
    # wait for a core (measured), which says nothing about the clean script
    high = [f for f in clean["findings"] if f["severity"] == "high" and f["code"] != "PIT108"]
    assert not high, high
    found = codes(clean)
    assert not found & {"PIT101", "PIT201", "PIT202", "PIT301", "PIT501", "PIT603", "PIT605", "PIT803"}, found
    assert clean["observations"]["loaders"][0]["num_workers"] == 2
    assert clean["observations"]["forwards"]["autocast"] == {"bfloat16": 5}


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_report_renders_in_headless_chromium(cnn, tmp_path):
    report, html = cnn
    text = html.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://cdn" not in text
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium; apt-get install chromium)")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         "--dump-dom", html.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert proc.returncode == 0 and "<svg" in dom, proc.stderr[-2000:]
    charts = dict(re.findall(r'<figure class="chart" data-kind="(\w+)" data-points="(\d+)"', dom))
    assert set(charts) == {"stacked", "line", "bar"}, charts
    # the breakdown bar has one segment per phase of the report (data, host, forward, ...);
    # the per-step chart plots the 3 observed steps; warm-up and profiled steps are listed
    assert int(charts["stacked"]) == len(report["breakdown"]) >= 6 and int(charts["line"]) == 3 and int(charts["bar"]) >= 4
    assert "step 0 (warmup):" in dom and "(profiled):" in dom and " ms</text>" in dom
    widths = [float(w) for w in re.findall(r'<rect class="bar"[^>]*width="([\d.]+)"', dom)]
    assert widths and max(widths) > 10
    assert "PIT101" in dom and "Findings, ranked by impact" in dom
