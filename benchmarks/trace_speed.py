"""``pitstop trace`` against HolisticTraceAnalysis (HTA): wall time and peak memory, same files.

    python benchmarks/trace_speed.py --hta-python /work/hta-venv/bin/python [--repeats 3]
        [--traces ../shared/traces] [--big-mb 1024] [--big-source FILE] [--work DIR]
        [--hta-mem-gb 16] [--timeout 1800] [--only-big | --no-big | --job [--job-ranks 128]] [--json OUT]

``--job``: one folder of 128 rank traces (``benchmarks/trace_job128.py``: one real rank shifted
and stretched, stragglers planted) made in ``--work``; each tool reads the whole folder once
(HTA: ``TraceAnalysis(trace_dir=FOLDER)``, every rank), and the run says whether pitstop named
exactly the planted culprits and how many lines its text output has.

Each file is analysed by both tools, each in a fresh process, one after the other and repeats
interleaved (pitstop, HTA, pitstop, HTA, ...), so machine load hits both alike; the table shows
the median wall time and the largest peak RSS of each, and their ratios (HTA / pitstop: above 1,
pitstop is faster or smaller).

- pitstop: ``python -m pitstop trace FILE --format json`` (the whole analysis: steps, breakdown,
  kernels, operators, findings; JSON written to a file).
- HTA: ``TraceAnalysis(trace_dir=D)`` (its parser with default settings) then
  ``get_temporal_breakdown()`` and ``get_gpu_kernel_breakdown()``, D a folder holding only a link
  to the file. HTA runs in its own virtual environment (``--hta-python``; install it with
  ``python -m venv V && V/bin/pip install holistictraceanalysis``), capped at ``--hta-mem-gb`` of
  address space so that a file it cannot hold fails instead of exhausting the machine.

Peak RSS is the child's ``ru_maxrss`` from ``os.wait4`` (its own process tree). The large trace
is made by ``benchmarks/big_trace.py`` from ``--big-source`` (default: the HTA trace_diff control
trace) into ``--work`` and kept there for the next run. Not a test: timings belong here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from big_trace import make_big_trace  # noqa: E402
from trace_job128 import DEFAULT_SOURCE, PLANT, make_job  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HTA_SNIPPET = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
"""
# the recorded traces of shared/traces (its README); tool outputs are left out
SKIP = ("gpu_metrics_expected.json", "overlaid_critical_path_trace.json.gz")


@dataclass(frozen=True)
class Run:
    wall: float
    rss: int  # bytes
    ok: bool
    error: str = ""


def measure(cmd: list[str], *, mem_bytes: int | None = None, timeout: float = 1800.0,
            env: dict[str, str] | None = None) -> Run:
    """Run ``cmd``; wall seconds, peak RSS (bytes) of its process tree, and whether it exited 0."""
    def limit() -> None:
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=limit)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss * 1024
        if proc.returncode == 0:
            return Run(wall, rss, True)
        err.seek(0)
        lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
        why = "timed out" if wall >= timeout else (lines[-1][:120] if lines else f"exit {proc.returncode}")
        return Run(wall, rss, False, why)


def pitstop_cmd(path: Path, out_json: Path, fmt: str = "json") -> list[str]:
    code = ("import sys; from pitstop.cli import main; sys.stdout = open(sys.argv[2], 'w'); "
            "sys.exit(main(['trace', sys.argv[1], '--format', sys.argv[3]]))")
    return [sys.executable, "-c", code, str(path), str(out_json), fmt]


def bench_job(folder: Path, hta_python: str, mem_gb: float, timeout: float, work: Path) -> dict:
    """The many-rank job folder: pitstop (JSON, then text), HTA, once each, one after the other;
    whether pitstop named exactly the planted culprits, and the lines of its text output."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    out_json, out_text = work / "job-pitstop.json", work / "job-pitstop.txt"
    ours = measure(pitstop_cmd(folder, out_json), timeout=timeout, env=env)
    theirs = measure([hta_python, "-c", HTA_SNIPPET, str(folder)], mem_bytes=int(mem_gb * 2**30), timeout=timeout,
                     env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    text = measure(pitstop_cmd(folder, out_text, "text"), timeout=timeout, env=env)
    files = sorted(folder.iterdir())
    found = {}
    if ours.ok:
        doc = json.loads(out_json.read_text())
        st = doc.get("straggle") or {}
        found = {"stragglers": [(s["rank"], s["cause"]) for s in st.get("stragglers", [])],
                 "one_offs": [(s["rank"], s["cause"]) for s in st.get("one_offs", [])],
                 "planted": {str(r): list(v[:2]) for r, v in PLANT.items()}}
    return {"file": str(folder), "ranks": len(files), "bytes": sum(f.stat().st_size for f in files),
            "pitstop": summary([ours]), "hta": summary([theirs]), "text": summary([text]),
            "text_lines": len(out_text.read_text().splitlines()) if text.ok else None, "found": found}


def shared_traces(root: Path) -> list[Path]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and (p.name.endswith(".json.gz") or p.name.endswith(".json"))
                   and p.name not in SKIP)
    return files


def bench_file(path: Path, hta_python: str, repeats: int, mem_gb: float, timeout: float, work: Path) -> dict:
    link_dir = Path(tempfile.mkdtemp(dir=work, prefix="hta-"))
    (link_dir / path.name).symlink_to(path.resolve())
    out_json = work / "pitstop-out.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(measure(pitstop_cmd(path, out_json), timeout=timeout, env=env))
        theirs.append(measure([hta_python, "-c", HTA_SNIPPET, str(link_dir)], mem_bytes=int(mem_gb * 2**30),
                              timeout=timeout, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}))
    return {"file": str(path), "bytes": path.stat().st_size, "pitstop": summary(ours), "hta": summary(theirs)}


def summary(runs: list[Run]) -> dict:
    good = [r for r in runs if r.ok]
    if not good:
        return {"ok": False, "error": runs[-1].error, "wall": runs[-1].wall, "rss": max(r.rss for r in runs)}
    return {"ok": True, "wall": statistics.median(r.wall for r in good), "rss": max(r.rss for r in good),
            "runs": [asdict(r) for r in runs]}


def _cell(side: dict) -> tuple[str, str]:
    wall, rss = f"{side['wall']:.2f} s", f"{side['rss'] / 2**20:,.0f} MiB"
    if not side["ok"]:
        return f"failed after {wall}: {side['error']}", f"{rss} at failure"
    return wall, rss


def table(rows: list[dict], root: Path) -> str:
    lines = ["| file | MB | pitstop wall | pitstop peak RSS | HTA wall | HTA peak RSS | wall HTA/pitstop | RSS HTA/pitstop |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p, h = r["pitstop"], r["hta"]
        name = str(Path(r["file"]).relative_to(root)) if Path(r["file"]).is_relative_to(root) else Path(r["file"]).name
        both = p["ok"] and h["ok"]
        wr = f"{h['wall'] / p['wall']:.1f}x" if both else "n/a"
        mr = f"{h['rss'] / p['rss']:.1f}x" if both else "n/a"
        lines.append(f"| `{name}` | {r['bytes'] / 1e6:.1f} | {' | '.join(_cell(p))} | {' | '.join(_cell(h))} | {wr} | {mr} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", required=True, help="python of a virtual environment with holistictraceanalysis")
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--repeats", type=int, default=3, help="runs per tool and file (the big trace: 1)")
    ap.add_argument("--big-mb", type=float, default=1024.0, help="size of the generated trace (MiB)")
    ap.add_argument("--big-source", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "pitstop-trace-speed")
    ap.add_argument("--hta-mem-gb", type=float, default=16.0, help="address-space cap for HTA (GiB)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--only-big", action="store_true")
    group.add_argument("--no-big", action="store_true")
    group.add_argument("--job", action="store_true",
                       help="only the many-rank job (benchmarks/trace_job128.py, made in --work)")
    ap.add_argument("--job-ranks", type=int, default=128)
    ap.add_argument("--json", type=Path, help="also write every measurement as JSON")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.job:
        folder = a.work / f"job{a.job_ranks}"
        if not folder.exists():
            make_job(folder, ranks=a.job_ranks, source=a.traces / DEFAULT_SOURCE)
        rows.append(bench_job(folder, a.hta_python, a.hta_mem_gb, a.timeout, a.work))
        r = rows[-1]
        print(f"pitstop text output: {r['text_lines']} lines in {r['text']['wall']:.2f} s; found {r['found']}")
    elif not a.only_big:
        for path in shared_traces(a.traces):
            rows.append(bench_file(path, a.hta_python, a.repeats, a.hta_mem_gb, a.timeout, a.work))
            print(table(rows[-1:], a.traces).splitlines()[-1], file=sys.stderr, flush=True)
    if not a.no_big and not a.job:
        source = a.big_source or a.traces / "hta" / "trace_diff" / "control" / "control.json.gz"
        big = a.work / f"big-{int(a.big_mb)}mb" / f"{source.name.split('.')[0]}_x.json"
        if not big.exists():
            print(json.dumps(make_big_trace(source, big, int(a.big_mb * 2**20))), file=sys.stderr)
        rows.append(bench_file(big, a.hta_python, 1, a.hta_mem_gb, a.timeout, a.work))
    import platform

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
          f"python {platform.python_version()}\n")
    print(table(rows, a.traces))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
