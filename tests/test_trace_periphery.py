"""Around ``pitstop trace``: ``pitstop compare`` on the HTA control/test trace pair, the HTML
page of a trace report, and a live CPU doctor trace read back as a host-only trace."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from conftest import FIXTURES, ROOT, run_cli

TRACES = ROOT.parent / "shared" / "traces"
DIFF = TRACES / "hta" / "trace_diff"
needs_traces = pytest.mark.skipif(not DIFF.is_dir(), reason=f"shared traces not found at {TRACES}")
CONTROL, TEST = DIFF / "control" / "control.json.gz", DIFF / "test" / "test.json.gz"


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.bad = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in ("meta", "br", "rect", "line", "circle", "polyline", "text", "title") or tag == "title":
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in ("rect", "line", "circle", "polyline", "text", "meta", "br"):
            return
        if not self.stack or self.stack[-1] != tag:
            self.bad.append(tag)
        else:
            self.stack.pop()


@needs_traces
@pytest.mark.slow
def test_compare_hta_pair_says_slower_and_names_both_gpus():
    r = run_cli("compare", str(CONTROL), str(TEST), "--format", "json", "--fail-over", "1000")
    assert r.returncode == 0, r.stderr  # slower by less than 1000%: the report, and exit 0
    d = json.loads(r.stdout)
    assert d["kind"] == "trace" and d["a"]["steps"] == 6 and d["b"]["steps"] == 6
    # the README's medians: 76.8 ms (control, A100) and 114.7 ms (test, V100)
    assert d["step"]["a"] == pytest.approx(0.0768, abs=5e-4) and d["step"]["b"] == pytest.approx(0.1147, abs=5e-4)
    assert d["step"]["verdict"] == "slower"
    hw = [n for n in d["notes"] if "different hardware" in n]
    assert hw and "A100-PG509-200" in hw[0] and "V100-SXM2-16GB" in hw[0]
    phases = {p["name"]: p for p in d["phases"]}
    assert set(phases) >= {"compute", "communication", "memcpy/memset", "gpu idle"}
    # the phases add up to the step (medians of parts need not, their per-step values do)
    kernels = {k["name"]: k for k in d["kernels"]}
    assert any(k.startswith("ncclKernel_AllReduce") for k in kernels)
    assert d["operators"], "operators joined to their kernels through the runtime calls"
    text = run_cli("compare", str(CONTROL), str(TEST), "--fail-over", "10")
    assert text.returncode == 1  # slower by more than 10%: the report is still printed, and exit 1
    assert "different hardware" in text.stdout and "slower" in text.stdout
    same = json.loads(run_cli("compare", str(CONTROL), str(CONTROL), "--format", "json").stdout)
    assert same["step"]["verdict"].startswith("no change") and same["notes"] == []


@needs_traces
def test_trace_side_phases_add_up_to_each_step():
    from pitstop.compare.trace_side import side_from_trace

    s = side_from_trace(CONTROL)
    assert len(s.steps) == 6 and s.ranks == (3,)
    for i, step in enumerate(s.steps):
        assert sum(p[i] for p in s.phases.values()) == pytest.approx(step, rel=1e-6)


@needs_traces
@pytest.mark.slow
def test_html_page_of_two_ranks(tmp_path):
    from pitstop.report.trace_html import render
    from pitstop.trace import trace

    job = tmp_path / "job"
    job.mkdir()
    (job / "rank3.json.gz").symlink_to(CONTROL)
    (job / "rank1.json.gz").symlink_to(TEST)
    report = trace([job], workers=1)
    page = render(report)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page.split("</style>")[0]
    assert "rank 1/2" in page and "rank 3/8" in page  # side by side, one column per rank
    assert "NVIDIA A100-PG509-200" in page and "Tesla V100-SXM2-16GB" in page
    assert "ncclKernel_AllReduce_RING_LL_Sum_float" in page
    assert page.count('data-kind="stacked"') == 2
    for f in report.findings:
        assert f.code in page
    tags = _Tags()
    tags.feed(page)
    assert not tags.bad


@needs_traces
@pytest.mark.slow
def test_trace_cli_html_option(tmp_path):
    out = tmp_path / "page.html"
    r = run_cli("trace", str(CONTROL), "--html", str(out))
    assert r.returncode == 0, r.stderr
    assert "rank 3/8" in out.read_text()


@pytest.mark.slow
def test_live_cpu_doctor_trace_reads_as_host_only(tmp_path, warm_doctor):
    trace_dir = tmp_path / "trace"  # the doctor's --trace (its CLI form: test_doctor_api.py), run warm
    r = warm_doctor.report(FIXTURES / "compare" / "sleepy.py", steps=3, warmup=1, probes=False, trace_dir=str(trace_dir))
    assert r.exit_code == 0, r.stderr[-2000:]
    t = run_cli("trace", str(trace_dir), "--format", "json")
    assert t.returncode == 0, t.stderr
    rank = json.loads(t.stdout)["ranks"][0]
    assert rank["host_only"] is True and any("host-only trace" in n for n in rank["notes"])
    assert rank["steps"] >= 2  # the doctor marks its traced steps ProfilerStep#N
    text = run_cli("trace", str(trace_dir))
    assert text.returncode == 0 and "host-only" in text.stdout and "Traceback" not in text.stderr
    c = run_cli("compare", str(trace_dir), str(trace_dir), "--format", "json")
    assert c.returncode == 0, c.stderr
    d = json.loads(c.stdout)
    assert "other host" in {p["name"] for p in d["phases"]} and any("host-only" in n for n in d["a"]["notes"])


@needs_traces
@pytest.mark.slow
def test_compare_saved_trace_reports(tmp_path):
    from pitstop.compare import sniff

    reports = []
    for name, src in (("control", CONTROL), ("test", TEST)):
        r = run_cli("trace", str(src), "--format", "json")
        assert r.returncode == 0, r.stderr
        reports.append(tmp_path / f"{name}.json")
        reports[-1].write_text(r.stdout)
    assert sniff(reports[0]) == "trace"
    c = run_cli("compare", str(reports[0]), str(reports[1]), "--format", "json")
    assert c.returncode == 0, c.stderr
    d = json.loads(c.stdout)
    assert d["step"]["verdict"].startswith("changed") and d["step"]["low"] == d["step"]["ratio"]  # no interval
    assert d["step"]["a"] == pytest.approx(0.0768, abs=5e-4) and d["step"]["b"] == pytest.approx(0.1147, abs=5e-4)
    assert any("different hardware" in n for n in d["notes"])
    assert {"compute", "communication"} <= {p["name"] for p in d["phases"]}
    assert run_cli("compare", str(reports[0]), str(reports[1]), "--fail-over", "10").returncode == 1
    # a saved report against a raw trace: one kind, the step still compared
    mixed = json.loads(run_cli("compare", str(reports[0]), str(TEST), "--format", "json").stdout)
    assert mixed["b"]["steps"] == 6 and mixed["step"]["b"] == pytest.approx(0.1147, abs=5e-4)
