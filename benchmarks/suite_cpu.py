"""Where the test suite's CPU goes: a pytest plugin that logs each test's CPU, and a report.

Record (from the repository root; works with and without pytest-xdist)::

    PYTHONPATH=benchmarks python -m pytest -n auto -p suite_cpu --cpu-log /tmp/cpu

Each process running tests appends one JSON line per test to ``DIR/cpu-<pid>.jsonl``: the test
id, its wall time, the CPU of the process running it (``self``) and the CPU of the children it
reaped meanwhile plus what its live descendants spent meanwhile (``children``: doctor, tune and
torchrun processes the test started, and the runs forked from a warm worker that outlives the
test, ``tests/doctor_warm.py``). A live descendant's CPU is read from ``/proc/PID/stat`` (its own
and its reaped children's); one reaped during the test counts whole in ``RUSAGE_CHILDREN``, less
what the earlier reading of it had already counted, so nothing counts twice. Without ``/proc``
a process is counted where it is reaped.

Report::

    python benchmarks/suite_cpu.py /tmp/cpu [--top 40]

prints the total, the CPU per test module and the most expensive tests, slowest first. Numbers
depend on the machine and on what else runs: name the CPU with them (DEVELOPERS.md, "Tests").
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time
from pathlib import Path

import pytest

__all__ = ["load", "main", "pytest_addoption", "pytest_runtest_protocol"]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _descendants_cpu() -> float:
    """CPU seconds of this process's live descendants, each with the children it reaped
    (``utime + stime + cutime + cstime`` of ``/proc/PID/stat``); 0 without ``/proc``."""
    total, todo, seen = 0.0, [os.getpid()], {os.getpid()}
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid in seen:
                    continue
                seen.add(kid)
                todo.append(kid)
                try:
                    with open(f"/proc/{kid}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].split()
                    total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
                except (OSError, ValueError, IndexError):
                    pass
    return total


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + _descendants_cpu()


def pytest_addoption(parser) -> None:
    parser.addoption("--cpu-log", metavar="DIR", default=None,
                     help="suite_cpu: append each test's CPU seconds to DIR/cpu-<pid>.jsonl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = item.config.getoption("--cpu-log")
    if folder is None:
        yield
        return
    own0, kids0 = _cpu()
    t0, start = time.perf_counter(), time.time()
    yield
    own1, kids1 = _cpu()
    row = {"id": item.nodeid, "wall": round(time.perf_counter() - t0, 3), "self": round(own1 - own0, 3),
           "children": round(kids1 - kids0, 3), "start": round(start, 3)}  # start: the workers' timeline
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"cpu-{os.getpid()}.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def load(folder: Path) -> list[dict]:
    """Every logged test row of ``folder``."""
    rows = []
    for path in sorted(folder.glob("cpu-*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{n}: not a JSON line ({exc.msg})") from None
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="the --cpu-log folder of a run")
    ap.add_argument("--top", type=int, default=40, help="tests to list (default 40)")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        ap.error(f"{args.folder}: no such folder")
    rows = load(args.folder)
    if not rows:
        ap.error(f"{args.folder}: no cpu-*.jsonl rows (was the run started with -p suite_cpu --cpu-log?)")
    cpu = {r["id"]: r["self"] + r["children"] for r in rows}
    per_module: collections.Counter = collections.Counter()
    for test_id, seconds in cpu.items():
        per_module[test_id.split("::", 1)[0]] += seconds
    print(f"{sum(cpu.values()):.0f} CPU-seconds over {len(rows)} tests in {len(per_module)} modules")
    print("\nper module")
    for module, seconds in per_module.most_common():
        if seconds >= 1.0:
            print(f"{seconds:8.1f}  {module}")
    print(f"\nthe {args.top} most expensive tests (CPU s, wall s)")
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:args.top]:
        print(f"{r['self'] + r['children']:8.1f} {r['wall']:7.1f}  {r['id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
