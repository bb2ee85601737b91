"""``pitstop trace``: read PyTorch profiler (Kineto) traces offline and say where the step went
(torch-free).

Layers: :mod:`~pitstop.trace.wire` (the file's typed fields) -> :mod:`~pitstop.trace.load`
(a :class:`~pitstop.trace.model.Timeline` of columns) -> :mod:`~pitstop.trace.scope` (the
window) -> one analyzer per concern (``busy``, ``idle``, ``kernels``, ``host``, ``copies``) ->
:class:`~pitstop.trace.result.RankResult` -> :mod:`~pitstop.trace.job` (ranks in parallel,
stragglers, the face-T checks of the tip modules) -> :class:`~pitstop.trace.result.TraceReport`.
"""

from pitstop.trace.analyze import analyze_file, analyze_timeline
from pitstop.trace.check import JobView, TraceCheck
from pitstop.trace.job import analyze_paths, rank_view, report_of, trace_files
from pitstop.trace.load import TraceError, load_timeline
from pitstop.trace.result import RankResult, TraceFinding, TraceReport
from pitstop.trace.thresholds import TraceThresholds

__all__ = ["analyze_file", "analyze_timeline", "analyze_paths", "report_of", "rank_view", "trace_files",
           "load_timeline", "TraceError", "RankResult", "TraceFinding", "TraceReport", "TraceThresholds",
           "TraceCheck", "JobView", "trace"]


def trace(paths, th: TraceThresholds = TraceThresholds(), workers: int | None = None) -> TraceReport:
    """The whole analysis: files or folders -> :class:`TraceReport`."""
    return report_of(analyze_paths(list(paths), th, workers), th)
