"""Make a job of many rank traces from one real rank, with planted stragglers.

    python benchmarks/trace_job128.py OUT_DIR [--ranks 128] [--source FILE] [--gzip]

The source (default: the HTA ``nccl_parser_config`` trace, rank 0 of a 2-rank A100 DDP job,
3 steps of about 220 ms, 5 all-reduces per step) is written once per rank with
``distributedInfo`` saying rank R of N, its clock shifted by a few microseconds per rank, and
its steps *stretched* where a real job would stretch them: a late rank gets the extra time
in its planted phase, every other rank gets it inside the step's first all-reduce kernel (it
waits there for the late rank), so that every step still ends together on all ranks.

Planted (``PLANT``): rank 17 is late in every step by 30 ms in its input (a DataLoader
``__next__`` the GPU idles through), rank 90 by 45 ms in GPU compute (its longest kernel of the
step before the all-reduce, stretched), rank 64 once, in step #5, by 60 ms of host work (a
Python function the GPU idles through). Every rank also gets up to 1 ms of deterministic
jitter in compute, which must not count. Not a test: used by ``benchmarks/trace_speed.py --job``.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
from pathlib import Path
from typing import Any

__all__ = ["make_job", "PLANT", "DEFAULT_SOURCE"]

DEFAULT_SOURCE = Path("hta") / "nccl_parser_config" / "nccl_data.json.gz"
#: rank -> (phase, extra microseconds, step numbers late in; None: every step)
PLANT: dict[int, tuple[str, float, tuple[int, ...] | None]] = {
    17: ("input", 30_000.0, None), 90: ("compute", 45_000.0, None), 64: ("host", 60_000.0, (5,))}
_COMM = "ncclKernel_AllReduce"


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _steps(events: list[dict]) -> list[tuple[int, float, float]]:
    out = []
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and name.startswith("ProfilerStep#"):
            out.append((int(name.split("#")[1]), float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return sorted(out)


def _anchors(events: list[dict], steps: list[tuple[int, float, float]]) -> dict[int, dict[str, float]]:
    """Per step: where each phase's extra time goes (a timestamp inside the step)."""
    kernels = sorted((float(e["ts"]), float(e["dur"]), e["name"]) for e in events
                     if e.get("ph") == "X" and e.get("cat") == "kernel")
    out = {}
    for n, t0, t1 in steps:
        inside = [k for k in kernels if t0 <= k[0] < t1]
        comm = next((k for k in inside if _COMM in k[2]), None)
        before = [k for k in inside if comm is None or k[0] < comm[0]]
        big = max((k for k in before if _COMM not in k[2] and "Broadcast" not in k[2]), key=lambda k: k[1], default=None)
        first = inside[0][0] if inside else t0 + 1
        out[n] = {"input": t0 + 1.0, "host": t0 + 2.0,
                  "compute": (big[0] + big[1] / 2) if big else first,
                  "comm": (comm[0] + comm[1] / 2) if comm else t1 - 1}
    return out


def _insertions(rank: int, anchors: dict[int, dict[str, float]]) -> list[tuple[float, float, str]]:
    """(timestamp, extra us, phase) for one rank: its own lateness, then the wait for the latest."""
    out = []
    for n, at in anchors.items():
        late = {r: us for r, (ph, us, when) in PLANT.items() if when is None or n in when}
        jitter = {r: 1000.0 * (((r * 7919 + n * 104729) % 11) / 10.0) for r in range(max(PLANT) + 200)}
        own_phase, own = ("compute", 0.0)
        if rank in late:
            own_phase, own = PLANT[rank][0], late[rank]
        worst = max([late[r] + jitter[r] for r in late] + [1000.0])
        mine = own + jitter[rank]
        if own:
            out.append((at[own_phase], own, own_phase))
        out.append((at["compute"] + 0.5, jitter[rank], "compute"))
        out.append((at["comm"], max(0.0, worst - mine), "comm"))
    return sorted(out)


def _shifted(events: list[dict], ins: list[tuple[float, float, str]], skew: float) -> list[dict]:
    ts_list = [t for t, _, _ in ins]
    cum = [0.0]
    for _, d, _ in ins:
        cum.append(cum[-1] + d)
    out = []
    for e in events:
        if "ts" not in e:
            out.append(e)
            continue
        ts = float(e["ts"])
        i = bisect.bisect_right(ts_list, ts)
        e2 = dict(e)
        e2["ts"] = ts + cum[i] + skew
        if "dur" in e:
            j = bisect.bisect_left(ts_list, ts + float(e["dur"]))
            e2["dur"] = float(e["dur"]) + cum[j] - cum[i]
        out.append(e2)
    return out


def _extra_events(ins: list[tuple[float, float, str]], events_pid: Any, tid: Any) -> list[dict]:
    """The host events of the planted phases (a DataLoader call, a Python function)."""
    names = {"input": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
             "host": "train.py(88): log_images"}
    out, shift = [], 0.0
    for t, d, ph in ins:
        if ph in names:
            out.append({"ph": "X", "cat": "user_annotation" if ph == "input" else "python_function",
                        "name": names[ph], "pid": events_pid, "tid": tid, "ts": t + shift, "dur": d, "args": {}})
        shift += d
    return out


def make_job(out_dir: Path, *, ranks: int = 128, source: Path, gz: bool = True) -> list[Path]:
    doc = _load(source)
    events = doc["traceEvents"]
    steps = _steps(events)
    anchors = _anchors(events, steps)
    host = next(e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                and e.get("name", "").startswith("ProfilerStep#"))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        ins = _insertions(r, anchors)
        evs = _shifted(events, ins, skew=13.0 * r)
        extra = _extra_events(ins, host["pid"], host["tid"])
        for e in extra:
            e["ts"] += 13.0 * r
        d = dict(doc, traceEvents=evs + extra,
                 distributedInfo=dict(doc.get("distributedInfo", {}), rank=r, world_size=ranks))
        path = out_dir / (f"rank{r:03d}.pt.trace.json" + (".gz" if gz else ""))
        data = json.dumps(d).encode()
        path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=128)
    ap.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces" / DEFAULT_SOURCE)
    ap.add_argument("--plain", action="store_true", help="write plain JSON, not gzipped")
    a = ap.parse_args()
    paths = make_job(a.out, ranks=a.ranks, source=a.source, gz=not a.plain)
    print(f"{len(paths)} files, {sum(p.stat().st_size for p in paths) / 1e6:.0f} MB in {a.out}")


if __name__ == "__main__":
    main()
