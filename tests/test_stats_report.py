"""Shared statistics and reporters: numbers and renderings that downstream reports rely on."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pitstop import stats
from pitstop.report import bar_chart, dumps, fmt_bytes, fmt_seconds, html_page, line_chart, stacked_bar, text_bar


def test_quantile_and_summary():
    xs = [5, 1, 3, 2, 4]
    assert stats.quantile(xs, 0.5) == 3
    assert stats.quantile(xs, 0.0) == 1 and stats.quantile(xs, 1.0) == 5
    assert stats.quantile([1, 2], 0.5) == 1.5
    s = stats.summarize(xs)
    assert (s.n, s.median, s.min, s.max, s.iqr) == (5, 3, 1, 5, 2)
    assert math.isnan(stats.summarize([]).median)
    with pytest.raises(ValueError):
        stats.quantile(xs, 1.5)


@given(st.lists(st.floats(min_value=0.001, max_value=1e3), min_size=1, max_size=40))
def test_summary_is_ordered(xs):
    s = stats.summarize(xs)
    assert s.min <= s.p10 <= s.median <= s.p90 <= s.max
    assert s.iqr >= 0


def test_ratio_interval_separates_a_real_speedup_from_noise():
    base = [1.00, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.00]
    fast = [x / 2 for x in base]
    r = stats.ratio_interval(base, fast)
    assert r.ratio == pytest.approx(2.0) and r.low > 1.8 and r.excludes(1.0, margin=0.05)
    tie = stats.ratio_interval(base, list(reversed(base)))
    assert tie.low <= 1.0 <= tie.high and not tie.excludes(1.0)
    with pytest.raises(ValueError):
        stats.ratio_interval([], base)


def test_formatters():
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * 1024**2) == "3.0 MiB" and fmt_bytes(None) == "n/a"
    assert fmt_seconds(0.0123) == "12.3 ms" and fmt_seconds(2) == "2.00 s" and fmt_seconds(5e-6) == "5 us"
    assert text_bar(0.5, 10).strip() == "█████" and len(text_bar(2.0, 10)) == 10


def test_dumps_makes_json_safe_values():
    from dataclasses import dataclass

    @dataclass
    class D:
        x: float
        y: tuple

    out = json.loads(dumps({"a": D(float("nan"), (1, 2)), "b": float("inf")}))
    assert out == {"a": {"x": None, "y": [1, 2]}, "b": None}


def test_charts_are_self_contained_svg_with_points():
    bars = bar_chart("t", ["a", "b<"], [1.0, 2.0], unit="ms")
    assert bars.points == 2 and bars.svg.count('class="bar"') == 2 and "b&lt;" in bars.svg
    stacked = stacked_bar("breakdown", [("data", 3), ("compute", 1)])
    assert "75%" in stacked.svg
    line = line_chart("steps", [1.0, 2.0, 1.5])
    assert line.svg.count('class="point"') == 3
    # long y labels carry the unit and fit left of the axis (not clipped at x < 0)
    wide = line_chart("steps", [1930.0, 700.0], unit="ms", x_label="step")
    label = re.search(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end">1930 ms</text>', wide.svg)
    assert label and float(label.group(1)) - 7 * len("1930 ms") >= 0, wide.svg
    assert ">step</text>" in wide.svg and "e+03" not in wide.svg
    page = html_page("Report <x>", [("Time", bars.to_html() + line.to_html())])
    assert page.startswith("<!DOCTYPE html>") and "Report &lt;x&gt;" in page
    assert not re.search(r"(src|href)=\"https?://", page), "the page must work offline"
    with pytest.raises(ValueError):
        bar_chart("t", ["a"], [1, 2])


def test_t_quantile_matches_the_tables():
    from pitstop.stats import t_quantile

    for p, df, table in ((0.95, 1, 6.314), (0.95, 2, 2.920), (0.95, 4, 2.132), (0.975, 2, 4.303), (0.95, 30, 1.697)):
        assert abs(t_quantile(p, df) - table) < 1e-3, (p, df)


def test_paired_interval_on_few_pairs_is_at_least_the_t_interval():
    """Three pairs that all favour the candidate do not decide a borderline 1.2x: the
    bootstrap alone (resamples of three values) would put the lower bound above 1.05."""
    import math

    from pitstop.stats import paired_ratio_interval, t_quantile

    ratios = [1.3, 1.1, 1.25]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    iv = paired_ratio_interval(ratios, confidence=0.9)
    assert iv.low <= math.exp(mean - t_quantile(0.95, 2) * sd / math.sqrt(3)) + 1e-12
    assert iv.low < 1.05 < iv.ratio
    strong = paired_ratio_interval([1.6, 1.7, 1.65], confidence=0.9)
    assert strong.low > 1.5  # a consistent large effect still decides on three pairs
