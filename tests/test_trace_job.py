"""Many-rank trace jobs (issue 30): planted culprits found with their cause, victims named,
recurring stragglers apart from one-offs, and the one-screen job view."""

from __future__ import annotations

import io
import json

import pytest

from trace_jobs import write_job

from pitstop.jsoncodec import dumps
from pitstop.ranks import RankView, StepStats, analyze_stragglers, match_steps
from pitstop.report.trace_html import render
from pitstop.report.trace_terminal import print_trace
from pitstop.trace import TraceReport, trace

PLANT = {5: ("data", 3_000, None), 20: ("compute", 3_500, None), 9: ("host", 4_000, {3})}


@pytest.fixture(scope="module")
def job32(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job32")
    write_job(folder, world=32, steps=6, plant=PLANT)
    return trace([folder], workers=2)


def test_planted_culprits_are_found_with_their_cause_and_no_others(job32):
    st = job32.straggle
    assert job32.stragglers == (5, 20)
    assert [(s.rank, s.cause, s.recurring) for s in st.stragglers] == [(5, "data", True), (20, "GPU compute", True)]
    assert [(s.rank, s.cause, s.recurring, s.late_keys) for s in st.one_offs] == [(9, "host", False, (4,))]
    assert st.matched == 6 and st.matched_by == "step number"
    # the culprit of each step is the last to arrive: rank 9 in its step, else rank 20 (3.5 ms > 3 ms)
    assert [ls.culprit for ls in st.steps] == [20, 20, 20, 9, 20, 20]
    data = st.stragglers[0]
    assert set(data.victims) == set(range(32)) - {5, 20}
    assert all(2.5e-3 < w < 3.5e-3 for w in data.victim_waits)
    assert {f.rank for f in job32.findings if f.code == "PIT704"} == {5, 20}


def test_balanced_many_rank_job_has_no_straggler_and_no_one_off(tmp_path):
    write_job(tmp_path, world=24, steps=5, jitter_us=300)
    report = trace([tmp_path], workers=2)
    assert report.straggle.stragglers == () and report.straggle.one_offs == ()
    assert "PIT704" not in {f.code for f in report.findings}


def test_steps_are_matched_by_their_number_not_their_order():
    # rank 1's trace starts one step later: matched by number, rank 1 is late in steps 2 and 3
    a = RankView(0, 2, StepStats(0.1, 0.1, 3), waits=(0.0, 0.05, 0.05), wait_keys=(1, 2, 3))
    b = RankView(1, 2, StepStats(0.1, 0.1, 3), waits=(0.0, 0.0, 0.9), wait_keys=(2, 3, 4))
    matched, how = match_steps([a, b])
    assert how == "step number" and [k for k, _ in matched] == [2, 3]
    st = analyze_stragglers([a, b], min_lag=0.01)
    assert [s.rank for s in st.stragglers] == [1] and st.stragglers[0].victims == (0,)
    by_order = analyze_stragglers([a, b.__class__(1, 2, b.step_time, waits=b.waits)], min_lag=0.01)
    assert by_order.matched_by == "order" and [s.rank for s in by_order.stragglers] != [1]


def test_job_view_fits_one_screen_and_names_each_finding_once(job32):
    out = io.StringIO()
    print_trace(job32, out)
    text = out.getvalue()
    assert len(text.splitlines()) < 120
    assert "rank 5: RECURRING" in text and "rank 9: one-off" in text and "cause data" in text
    assert text.count("PIT702 [") == 1 and "PIT702" in text and "/32 ranks" in text
    assert "rank 12 " not in text  # an ordinary rank gets no line of its own
    page = render(job32)
    assert page.count("<tr>") >= 32 and 'class="sortable"' in page


def test_report_json_round_trips_with_the_straggler_model(job32):
    back = TraceReport.from_dict(json.loads(dumps(job32.to_dict())))
    assert back.straggle == job32.straggle and back.job == job32.job


def test_128_ranks_one_screen_and_only_the_planted_culprits(tmp_path):
    plant = {17: ("data", 3_000, None), 90: ("compute", 4_000, None), 64: ("host", 5_000, {1})}
    write_job(tmp_path, world=128, steps=4, plant=plant)
    report = trace([tmp_path], workers=2)
    assert report.stragglers == (17, 90)
    assert [(s.rank, s.cause) for s in report.straggle.one_offs] == [(64, "host")]
    out = io.StringIO()
    print_trace(report, out)
    text = out.getvalue()
    assert len(text.splitlines()) < 400
    assert "PIT702 [" in text and text.count("PIT702 [") == 1 and "on 127/128 ranks (all 128 but 90)" in text
    assert "rank 17: RECURRING" in text and "rank 90: RECURRING" in text
