"""``pitstop compare``: two doctor reports or two traces of one job, quantity by quantity,
with a verdict that weighs the step-to-step noise (torch-free)."""

from pitstop.compare.compute import compare_sides, delta, unlike
from pitstop.compare.load import CompareInputError, load_side, side_from_report, sniff
from pitstop.compare.model import Comparison, Delta, Side

__all__ = ["Comparison", "Delta", "Side", "CompareInputError", "compare_sides", "delta", "unlike", "load_side",
           "side_from_report", "sniff"]
