"""Sets of time intervals (torch-free): unions, intersections and differences on numpy
columns, the arithmetic every analyzer of :mod:`pitstop.trace` shares."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Spans"]


@dataclass(frozen=True, eq=False)
class Spans:
    """Disjoint, sorted intervals ``[start[i], end[i])`` (microseconds)."""

    start: np.ndarray
    end: np.ndarray

    @staticmethod
    def of(start, end) -> Spans:
        """The union of possibly overlapping intervals."""
        s = np.asarray(start, dtype=np.float64)
        e = np.asarray(end, dtype=np.float64)
        keep = e > s
        s, e = s[keep], e[keep]
        if len(s) == 0:
            return Spans(s, e)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        new = np.empty(len(s), dtype=bool)
        new[0] = True
        new[1:] = s[1:] > reach[:-1]
        groups = np.cumsum(new) - 1
        starts = s[new]
        ends = np.zeros(len(starts))
        np.maximum.at(ends, groups, e)
        return Spans(starts, ends)

    @staticmethod
    def empty() -> Spans:
        return Spans(np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return len(self.start)

    @property
    def total(self) -> float:
        return float(np.sum(self.end - self.start))

    @property
    def first(self) -> float:
        return float(self.start[0]) if len(self) else 0.0

    @property
    def last(self) -> float:
        return float(self.end[-1]) if len(self) else 0.0

    def _sweep(self, other: Spans, need: int) -> Spans:
        t = np.concatenate([self.start, self.end, other.start, other.end])
        d = np.concatenate([np.ones(len(self)), -np.ones(len(self)),
                            np.full(len(other), need), -np.full(len(other), need)])
        if len(t) == 0:
            return Spans.empty()
        order = np.lexsort((d, t))  # at equal times ends (negative) first
        t, d = t[order], d[order]
        level = np.cumsum(d)
        seg = np.flatnonzero(level[:-1] == (1 + need if need > 0 else 1))
        return Spans.of(t[seg], t[seg + 1])

    def intersect(self, other: Spans) -> Spans:
        return self._sweep(other, 1)

    def minus(self, other: Spans) -> Spans:
        """Parts of ``self`` not covered by ``other``."""
        # level = self (0/1) - 2*other (0/-2): only 1 means "in self, not in other"
        t = np.concatenate([self.start, self.end, other.start, other.end])
        d = np.concatenate([np.ones(len(self)), -np.ones(len(self)), -2 * np.ones(len(other)), 2 * np.ones(len(other))])
        if len(t) == 0:
            return Spans.empty()
        order = np.lexsort((-np.abs(d), t))
        t, d = t[order], d[order]
        level = np.cumsum(d)
        seg = np.flatnonzero(level[:-1] == 1)
        return Spans.of(t[seg], t[seg + 1])

    def covered(self, start: float, end: float) -> float:
        """Length of ``[start, end)`` covered by these spans."""
        if end <= start or not len(self):
            return 0.0
        lo = int(np.searchsorted(self.end, start, side="right"))
        hi = int(np.searchsorted(self.start, end, side="left"))
        if hi <= lo:
            return 0.0
        s = np.maximum(self.start[lo:hi], start)
        e = np.minimum(self.end[lo:hi], end)
        return float(np.sum(np.clip(e - s, 0, None)))

    def contains(self, times: np.ndarray) -> np.ndarray:
        """Boolean mask: which ``times`` fall inside one of the spans."""
        i = np.searchsorted(self.start, times, side="right") - 1
        ok = i >= 0
        out = np.zeros(len(times), dtype=bool)
        out[ok] = times[ok] < self.end[i[ok]]
        return out
