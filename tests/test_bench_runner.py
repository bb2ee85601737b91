"""Every registered benchmark runs (tiny sizes) and returns a well-formed result; the runner
turns skips and errors into results with a reason instead of losing the other benchmarks."""

from __future__ import annotations

import json
import math

import pytest

from pitstop.bench import ERROR, SKIPPED, VERDICTS, Benchmark, BenchSkip, Claim, Measurement, Outcome
from pitstop.bench.runner import json_schema
from pitstop.report.bench_html import to_html
from pitstop.report.bench_text import to_json, to_markdown
from pitstop.bench.runner import BenchReport, available, run_one, select
from pitstop.bench.timing import BenchConfig, BenchContext

EXPECTED = {"PIT101", "PIT104", "PIT105", "PIT106", "PIT301", "PIT402", "PIT501", "PIT601", "PIT604", "PIT606",
            "PIT607"}


@pytest.fixture(scope="module")
def ctx():
    return BenchContext("cpu", "tiny", threads=1)


def test_every_b_tip_has_exactly_one_benchmark():
    from pitstop import catalog

    codes = [c.tip for c in available()]
    assert set(codes) == EXPECTED and len(codes) == len(set(codes))
    declared = {t.code for t in catalog.all_tips() if "B" in t.faces}
    assert declared == EXPECTED, "a tip declares face B without a benchmark, or the other way round"
    for cls in available():
        assert cls.claim.seed in catalog.get(cls.tip).seeds, f"{cls.tip}: the claim's seed is not one of the tip's"


def _check_result(cls, result):
    assert result.verdict in VERDICTS and result.reason.strip()
    assert not result.error, result.reason
    json.loads(to_json(BenchReport("tiny", {"device": "cpu"}, "now", [result])))  # JSON-safe
    if result.verdict == SKIPPED:
        return
    names = {m.name for m in result.measurements}
    wanted = set(cls.claim.candidate_names) | set(cls.claim.baseline_names) | set(cls.claim.expected)
    assert wanted <= names, f"{cls.tip}: claim names {wanted - names} not measured"
    for m in result.measurements:
        assert m.samples and all(math.isfinite(x) and x >= 0 for x in m.samples), m
    assert result.ratio is not None and math.isfinite(result.ratio.ratio)
    assert result.ratio.low <= result.ratio.ratio <= result.ratio.high
    assert result.workload
    for c in result.comparisons:
        assert c["ratio"]["value"] > 0


def _params():
    out = []
    for cls in available():
        marks = [pytest.mark.slow] if cls.compiles else []
        out.append(pytest.param(cls, marks=marks, id=cls.tip))
    return out


@pytest.mark.parametrize("cls", _params())
def test_each_benchmark_runs_tiny_and_is_well_formed(cls, ctx):
    result = run_one(cls, ctx)
    _check_result(cls, result)
    if cls.gpu_only:
        assert result.verdict == SKIPPED and "CUDA" in result.reason and result.measurements == []
    elif cls.claim.scope == "gpu":  # a GPU claim on this CPU: capped, numbers kept
        assert result.verdict == "not on this hardware", result.reason
        assert result.reason.startswith("the claim is about GPUs; measured here on CPU: ")
        assert result.ratio is not None and f"{result.ratio.ratio:.2f}x" in result.reason


def test_gpu_scoped_claims_are_pit106_pit301_pit604():
    # the seeds make these claims about GPUs (the sentences are quoted beside each `scope=`)
    scoped = {c.tip for c in available() if c.claim.scope == "gpu"}
    assert {"PIT301", "PIT604", "PIT106"} == scoped


def test_optimizer_state_matches_the_seed_and_adds_momentum(ctx):
    (cls,) = select(["PIT402"])
    result = run_one(cls, ctx)
    assert result.verdict == "confirmed", result.reason
    per_param = {m.name: m.rate() for m in result.measurements}
    assert per_param["SGD"] == 0 and per_param["SGD(momentum=0.9)"] == pytest.approx(1.0)
    assert per_param["AdamW"] == pytest.approx(2.0, rel=0.01)


def test_from_numpy_checks_sharing_for_real(ctx):
    (cls,) = select(["from-numpy"])
    result = run_one(cls, ctx)
    assert result.checks and all(result.checks.values()), result.checks
    copied = {m.name: m.samples[0] for m in result.measurements if m.info}
    assert copied["bytes copied by torch.from_numpy"] == 0 and copied["bytes copied by torch.tensor"] > 0


class _Base(Benchmark):  # no tip=: these are never registered
    title = "synthetic"
    claim = Claim(seed="002", text="b is faster", baseline="a", candidate="b")


class _Skips(_Base):
    def run(self, ctx):
        raise BenchSkip("needs something this machine lacks")


class _Crashes(_Base):
    def run(self, ctx):
        raise ZeroDivisionError("boom")


class _WrongNames(_Base):
    def run(self, ctx):
        return Outcome("w", [Measurement("a", (1.0,))])


class _Timed(_Base):
    def run(self, ctx):
        calls = []
        measured = ctx.time({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")})
        return Outcome("two no-ops", measured, notes=[f"{len(calls)} calls"])


def test_skips_and_errors_become_results_with_reasons(ctx):
    skipped = run_one(_Skips, ctx)
    assert skipped.verdict == SKIPPED and skipped.reason == "needs something this machine lacks"
    assert not skipped.error
    crashed = run_one(_Crashes, ctx)
    assert crashed.verdict == ERROR and crashed.error and "ZeroDivisionError: boom" in crashed.reason
    wrong = run_one(_WrongNames, ctx)
    assert wrong.verdict == ERROR and wrong.error and "'b'" in wrong.reason


def test_timer_gives_every_variant_samples(ctx):
    result = run_one(_Timed, ctx)
    assert result.verdict in VERDICTS and not result.error
    assert [m.name for m in result.measurements] == ["a", "b"]
    for m in result.measurements:  # every variant is timed in every round, at least min_rounds of them
        assert len(set(m.rounds)) >= ctx.mode.min_rounds and m.summary.n >= len(set(m.rounds))
    assert any(n.startswith("timed in ") for n in result.notes), result.notes


def test_select_by_code_or_slug_and_refuse_others():
    from pitstop.bench.runner import UnknownBenchmarkError

    assert [c.tip for c in select(["pit607", "optimizer-state"])] == ["PIT402", "PIT607"]
    with pytest.raises(UnknownBenchmarkError, match="has no benchmark"):
        select(["PIT102"])
    with pytest.raises(UnknownBenchmarkError) as exc:
        select(["PIT60"])
    assert any("PIT601" in s for s in exc.value.suggestions)


def test_config_is_validated():
    with pytest.raises(ValueError):
        BenchConfig(mode="slow")
    with pytest.raises(ValueError):
        BenchConfig(threads=0)


def test_report_renders_to_valid_json_markdown_and_html(ctx):
    jsonschema = pytest.importorskip("jsonschema")
    from pitstop.bench.device import device_info

    results = [run_one(_Timed, ctx), run_one(_Skips, ctx)]
    for r in results:
        r.code = "PIT999"
    report = BenchReport("tiny", device_info("cpu", 1), "2024-01-01T00:00:00+00:00", results,
                         load_average={"start": [0.1, 0.1, 0.1], "end": None})
    jsonschema.validate(json.loads(to_json(report)), json_schema())
    md = to_markdown(report, command="pitstop bench --quick")
    assert "| PIT999 |" in md and "`pitstop bench --quick`" in md and "skipped" in md
    page = to_html(report)
    assert page.count('data-kind="bar"') == 1  # one chart: the skipped result has none
    assert "needs something this machine lacks" in page


def test_a_benchmark_error_is_reported_as_an_error_and_the_cli_exits_1(ctx, monkeypatch, capsys):
    """Issue 29: on the H100 PIT606 raised (FusionMismatchError) and showed as **skipped** while
    `pitstop bench` exited 1 with nothing on stderr. An error is its own verdict, valid in the
    JSON schema, and the CLI names it on stderr; exit 1 because nothing was measured."""
    jsonschema = pytest.importorskip("jsonschema")
    from pitstop.bench.device import device_info
    from pitstop.cli import main
    from pitstop.cli.bench import BenchCommand

    crashed, timed = run_one(_Crashes, ctx), run_one(_Timed, ctx)
    crashed.code, timed.code = "PIT998", "PIT999"
    report = BenchReport("tiny", device_info("cpu", 1), "2024-01-01T00:00:00+00:00", [crashed, timed],
                         load_average={"start": None, "end": None})
    jsonschema.validate(json.loads(to_json(report)), json_schema())
    monkeypatch.setattr(BenchCommand, "_run", staticmethod(lambda selected, config: report))
    assert main(["bench", "PIT402", "--device", "cpu", "--format", "markdown"]) == 1
    out = capsys.readouterr()
    assert "| PIT998 |" in out.out and "**error** | error: ZeroDivisionError: boom |" in out.out
    assert "| PIT999 |" in out.out and "**error**" not in out.out.split("| PIT999 |")[1].split("\n")[0]
    assert "PIT998 raised, not measured: error: ZeroDivisionError: boom" in out.err
    assert "exit 1: 1 of 2 benchmark(s) raised an error" in out.err
    report.results = [timed]
    assert main(["bench", "PIT402", "--device", "cpu", "--format", "markdown"]) == 0
