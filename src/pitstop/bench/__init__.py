"""``pitstop bench``: reproduce each tip's claim with a measured number on this machine (face B).

- :mod:`pitstop.bench.base` (torch-free): :class:`Benchmark`, :class:`Claim`,
  :class:`Measurement`, :class:`Outcome`, :class:`BenchSkip`: what tip modules import.
- :mod:`pitstop.bench.verdict` (torch-free): the verdict rule.
- :mod:`pitstop.bench.timing`: :class:`~pitstop.bench.timing.BenchContext` (adaptive rounds in a time budget, stopped
  once the verdict is decided).
- :mod:`pitstop.bench.runner`: selection, running, results, the JSON schema. The output is rendered
  by ``report/bench_text.py`` (terminal, JSON, Markdown) and ``report/bench_html.py``.

Only the torch-free names are imported here, so ``import pitstop.bench.base`` from a tip
module never loads torch.
"""

from pitstop.bench.base import KINDS, Benchmark, BenchSkip, Claim, Comparison, Measurement, Outcome
from pitstop.bench.verdict import CONFIRMED, ERROR, NOT_HERE, REFUTED, SCOPES, SKIPPED, VERDICTS, Verdict, judge

__all__ = [
    "KINDS",
    "Benchmark",
    "BenchSkip",
    "Claim",
    "Comparison",
    "Measurement",
    "Outcome",
    "CONFIRMED",
    "ERROR",
    "NOT_HERE",
    "REFUTED",
    "SCOPES",
    "SKIPPED",
    "VERDICTS",
    "Verdict",
    "judge",
]
