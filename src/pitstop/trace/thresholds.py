"""The numbers ``pitstop trace`` compares against (torch-free), documented in docs/trace.md:
the one :class:`pitstop.thresholds.Thresholds` of the doctor and the trace."""

from __future__ import annotations

from pitstop.thresholds import Thresholds

__all__ = ["TraceThresholds"]

#: the trace's name for the one thresholds type
TraceThresholds = Thresholds
