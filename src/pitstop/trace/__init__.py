"""``pitstop trace``: read PyTorch profiler (Kineto) traces offline and say where the step went
(torch-free).

Layers: :mod:`~pitstop.trace.wire` (the file's typed fields) -> :mod:`~pitstop.trace.load`
(a :class:`~pitstop.trace.model.Timeline` of columns) -> :mod:`~pitstop.trace.scope` (the
window) -> one analyzer per concern (``busy``, ``idle``, ``kernels``, ``host``, ``copies``) ->
:class:`~pitstop.trace.result.RankResult` -> :mod:`~pitstop.trace.job` (ranks in parallel,
stragglers, the face-T checks of the tip modules) -> :class:`~pitstop.trace.result.TraceReport`.

Names resolve lazily: tip modules import :mod:`pitstop.trace.check` at catalog load time
(``pitstop lint`` too), which must not pull in numpy or msgspec.
"""

from pitstop._lazy import lazy_exports

_LAZY = {
    "analyze_file": "pitstop.trace.analyze", "analyze_timeline": "pitstop.trace.analyze",
    "analyze_paths": "pitstop.trace.job", "report_of": "pitstop.trace.job", "rank_view": "pitstop.trace.job",
    "trace_files": "pitstop.trace.job", "trace": "pitstop.trace.job",
    "load_timeline": "pitstop.trace.load", "TraceError": "pitstop.trace.load",
    "RankResult": "pitstop.trace.result", "TraceReport": "pitstop.trace.result",
    "Finding": "pitstop.findings", "Thresholds": "pitstop.thresholds",
    "TraceCheck": "pitstop.trace.check", "JobView": "pitstop.trace.check",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
