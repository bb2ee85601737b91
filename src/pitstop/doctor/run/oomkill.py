"""A child killed while its memory grew: the parent's half of the out-of-memory diagnosis (torch-free).

The kernel's OOM killer ends a process with SIGKILL and no chance to say anything. The child
leaves a trail instead: ``doctor/record/oom/trail.py`` samples its resident memory every
0.1 s and keeps the last samples (time, RSS, step, phase) in ``RESULT.json.rss``, rewritten
atomically every half second. When the child dies by SIGKILL without a report,
:meth:`KillWatch.record` reads that trail: memory that grew to its highest just before the
kill, or the cgroup's ``oom_kill`` counter gone up during the run, make it a likely
out-of-memory (:class:`~pitstop.doctor.analysis.oom_records.OomRecord`, kind ``"killed"``),
reported as the script's failure, never as pitstop's. A SIGKILL with flat memory (someone ran
``kill -9``) is not called an out-of-memory.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from pitstop.doctor.analysis.oom_records import OomRecord, RssSample
from pitstop.units import mib

__all__ = ["RSS_SUFFIX", "KillWatch", "grew", "GROWTH_BYTES", "WINDOW_S"]

#: the file beside RESULT.json that holds the child's last memory samples
RSS_SUFFIX = ".rss"
#: memory that grew by at least this much (or 10% of where it started) in the window grew
GROWTH_BYTES = 64 * 2**20
#: the last seconds of samples looked at
WINDOW_S = 5.0
_CGROUP_EVENTS = "/sys/fs/cgroup/memory.events"


def _oom_kills() -> int | None:
    """The cgroup's count of processes its OOM killer ended (cgroup v2), None when unreadable."""
    try:
        for line in Path(_CGROUP_EVENTS).read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _samples(path: str) -> tuple[list[RssSample], int | None]:
    """The trail's samples (seconds before the last one) and the memory limit it names."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = data["samples"]
        end = rows[-1][0]
        return [RssSample(seconds=end - t, rss=int(rss), step=int(step), phase=str(phase))
                for t, rss, step, phase in rows], data.get("capacity")
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return [], None


def grew(samples: list[RssSample]) -> bool:
    """Memory rose to its highest at the end of the window (see :data:`GROWTH_BYTES`)."""
    window = [s for s in samples if s.seconds <= WINDOW_S]
    if len(window) < 2:
        return False
    low, high, last = min(s.rss for s in window), max(s.rss for s in window), window[-1].rss
    return last >= 0.95 * high and last - low >= min(GROWTH_BYTES, max(low // 10, 2**20))


class KillWatch:
    """Made before the child starts (the cgroup counter then); :meth:`record` after it died."""

    def __init__(self) -> None:
        self.kills = _oom_kills()

    def record(self, result_path: str | Path, returncode: int | None) -> OomRecord | None:
        """The out-of-memory record of a child killed by SIGKILL while its memory grew, else None."""
        if returncode not in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return None
        samples, capacity = _samples(str(result_path) + RSS_SUFFIX)
        after = _oom_kills()
        killer = self.kills is not None and after is not None and after > self.kills
        growing = grew(samples)
        if not (growing or killer):
            return None
        evidence = []
        window = [s for s in samples if s.seconds <= WINDOW_S]
        if growing:
            low = min(window, key=lambda s: s.rss)
            evidence.append(f"resident memory grew from {mib(low.rss)} to {mib(window[-1].rss)} in the last "
                            f"{low.seconds:.1f} s before the kill" + (
                                f", {window[-1].rss / capacity:.0%} of {mib(capacity)}" if capacity else ""))
        if killer:
            evidence.append(f"the cgroup's oom_kill counter went from {self.kills} to {after} during the run "
                            f"({_CGROUP_EVENTS})")
        last = samples[-1] if samples else None
        return OomRecord(
            kind="killed", error="SIGKILL", device="cpu",
            message="killed by SIGKILL (signal 9) " + ("while its memory grew" if growing else "by the cgroup's OOM killer")
                    + ": likely out of memory (the kernel's OOM killer ends a process this way)",
            step=last.step if last else None, phase=last.phase or None if last else None,
            capacity=capacity, capacity_source="the cgroup's memory.max or the machine's RAM" if capacity else "",
            script_exit=128 + signal.SIGKILL, rss=window or samples, evidence=evidence)

