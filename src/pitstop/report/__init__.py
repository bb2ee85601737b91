"""Reporters shared by doctor, tune and bench: terminal (rich), JSON and offline HTML/SVG.

Mechanisms build plain dicts/dataclasses of measurements; this package only renders them.
"""

from pitstop.report.html import Chart, bar_chart, html_page, line_chart, stacked_bar
from pitstop.jsoncodec import dumps, to_jsonable
from pitstop.report.terminal import fmt_bytes, fmt_seconds, make_console, text_bar

__all__ = [
    "Chart",
    "bar_chart",
    "dumps",
    "fmt_bytes",
    "fmt_seconds",
    "html_page",
    "line_chart",
    "make_console",
    "stacked_bar",
    "text_bar",
    "to_jsonable",
]
