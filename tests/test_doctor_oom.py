"""An out-of-memory failure is a diagnosis: where, what was allocated, and what fits.

Runs forked from the warm doctor worker (``tests/doctor_warm.py``), the report read as
``pitstop doctor --format json`` prints it:

- a backward that raises ``torch.OutOfMemoryError`` at a chosen allocation level (pitstop's
  tracked allocator with a limit, ``tests/fixtures/doctor/oom_backward.py``): the report names
  the phase and the block whose backward ran (the script's own full backward hooks say which),
  its categories add up to the allocated total the allocator counted, within 5%, and the exit
  codes are the script's failure;
- a process killed by SIGKILL while its resident memory grows: a likely out-of-memory, the
  script's failure, never a crash of pitstop.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.slow

OOM_BACKWARD = str(FIXTURES / "doctor" / "oom_backward.py")
OOM_KILLED = str(FIXTURES / "doctor" / "oom_killed.py")


@pytest.fixture(scope="module")
def backward_oom(warm_doctor, tmp_path_factory):
    truth = tmp_path_factory.mktemp("oom") / "truth.json"
    out = warm_doctor.report(OOM_BACKWARD, str(truth), steps=3, warmup=2, probes=False, timeout=240)
    return out, json.loads(truth.read_text())


def test_oom_mid_backward_names_the_phase_and_the_module(backward_oom):
    out, truth = backward_oom
    oom = out.data["oom"]
    assert oom["kind"] == "raised" and oom["error"] == "OutOfMemoryError"
    assert oom["phase"] == "backward"
    assert truth["block"] and oom["module"].startswith(truth["block"] + "."), (oom["module"], truth)
    assert oom["step"] == truth["step"] == 3 and oom["step_kind"] == "observed"
    assert oom["line"].startswith("oom_backward.py:")
    assert oom["capacity"] == truth["limit"] and oom["capacity_source"] == "the tracked allocator's limit"
    assert out.data["message"].startswith("out of memory (backward of " + oom["module"])


def test_oom_categories_add_up_to_what_the_allocator_counted(backward_oom):
    out, truth = backward_oom
    parts = out.data["oom"]["parts"]
    counted = int(re.search(r"allocated (\d+) bytes", truth["message"]).group(1))  # the allocator, at the failure
    assert parts["total"] == counted
    attributed = sum(parts[k] for k in ("params", "grads", "optimizer_state", "activations", "temporaries"))
    assert abs(attributed - counted) <= 0.05 * counted, (attributed, counted, parts)
    # every category was there: AdamW state (2x the parameters, plus a 4-byte step per tensor), gradients of
    # the blocks done, saved activations
    assert 0 <= parts["optimizer_state"] - 2 * parts["params"] <= 4 * 64
    assert 0 < parts["grads"] < parts["params"] and parts["activations"] > 0
    blocks = {m["module"].split(".")[0] + "." + m["module"].split(".")[1] for m in parts["by_module"]
              if m["module"].startswith("blocks.")}
    assert "blocks.0" in blocks  # the first blocks' activations are still saved when block 2 fails


def test_oom_exit_status_stays_the_scripts(backward_oom):
    out, _ = backward_oom
    assert out.exit_code == 3 and out.data["exit_code"] == 3 and out.data["outcome"] == "script_failed"
    assert out.data["oom"]["script_exit"] == 1  # what `python oom_backward.py` exits with
    assert "torch.OutOfMemoryError" in out.data["traceback"]
    assert "probes skipped: the script ran out of memory" not in out.data["notes"]  # ran with --no-probes


def test_oom_report_says_what_fits_and_ranks_the_fixes(backward_oom):
    out, _ = backward_oom
    fit = out.data["memory_fit"]
    assert fit["shown"] and fit["basis"]["source"] == "profile"  # the profiled warmup step came before the failure
    assert fit["limit"] == out.data["oom"]["capacity"] and fit["fits"] is False
    codes = [f["estimate"]["code"] for f in fit["fixes"]]
    assert "PIT402" in codes and all(f["saves"] > 0 for f in fit["fixes"])
    from pitstop.report.doctor_terminal import render

    buf = io.StringIO()
    render(out.diagnosis, file=buf)
    text = buf.getvalue()
    assert "Out of memory: backward of blocks." in text and "What fits (limit" in text
    assert "fixes, ranked by memory saved per time lost:" in text and "1. PIT" in text


def test_sigkill_while_memory_grows_is_a_likely_oom_not_a_crash_of_pitstop(warm_doctor):
    out = warm_doctor.report(OOM_KILLED, steps=5, warmup=1, probes=False, timeout=240)
    d = out.data
    assert out.exit_code == 3 and d["outcome"] == "script_failed" and d["status"] == "crashed"
    oom = d["oom"]
    assert oom["kind"] == "killed" and oom["error"] == "SIGKILL" and oom["script_exit"] == 137
    assert "likely out of memory" in d["message"] and "the script was killed by SIGKILL" in d["message"]
    assert "pitstop" not in d["message"] and "internal error" not in d["message"]
    rss = [s["rss"] for s in oom["rss"]]
    assert rss[-1] - min(rss) >= 64 * 2**20 and rss[-1] == max(rss)  # it grew up to the kill
    assert oom["step"] == 3


def test_html_report_shows_the_failure_and_what_fits(backward_oom):
    from pitstop.report.doctor_html import doctor_html

    page = doctor_html(backward_oom[0].diagnosis)
    assert "Out of memory" in page and "What fits" in page and "backward of blocks.2." in page


@pytest.mark.parametrize("command", ["doctor", "tune"])
def test_a_memory_budget_that_is_no_size_is_a_usage_error(cli, command):
    out = cli(command, str(FIXTURES / "doctor" / "tiny.py"), "--memory-budget", "12XB")
    assert out.returncode == 2
    assert "--memory-budget: memory size '12XB' not understood" in out.stderr and "Traceback" not in out.stderr
