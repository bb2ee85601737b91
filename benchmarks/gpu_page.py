"""Write ``docs/bench/gpu.md`` (and ``docs/bench/gpu.json``) from what one
``benchmarks/gpu_check.sh`` run wrote: nothing is typed in by hand, every number comes from a file.

    python benchmarks/gpu_page.py gpu_check.tar.gz          # or the unpacked folder
    python benchmarks/gpu_page.py DIR --page docs/bench/gpu.md --json docs/bench/gpu.json
    python benchmarks/gpu_page.py gpu_run1 --note "Measured before the fixes of ..."

The source is the tarball or the folder; its top folder may have any name (gpu_check_out,
gpu_run1, ...): the run is the folder holding ``00_machine.txt``. ``--note`` puts a paragraph
under the title (e.g. which commit the run measured, and what was fixed after it).

Sections: the machine (GPU, driver, torch, CUDA: from ``00_machine.txt``), the script's stages
with their seconds (``summary.txt``), the selftest's stages (``selftest.json``), one row per
bench code with its verdict, ratio and interval (``bench/gpu.json``), then the bench's own
Markdown, and the engine against a raw loop (``engine/engine_vs_raw.md``). A missing file is
said to be missing, never filled in.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pitstop.atomic import write_atomic  # noqa: E402


def _root(path: Path, scratch: Path) -> Path:
    """The folder holding 00_machine.txt (unpacking a tarball first)."""
    if path.is_file():
        with tarfile.open(path) as tar:
            tar.extractall(scratch, filter="data")
        path = scratch
    found = sorted(path.rglob("00_machine.txt"))
    if not found:
        raise SystemExit(f"{path}: no 00_machine.txt inside: not a gpu_check.sh output")
    return found[0].parent


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _machine(root: Path) -> list[str]:
    text = _read(root / "00_machine.txt") or ""
    keep = ("gpu_check.sh started", "commit:", "name, driver_version", "torch ", "GPU ", "python ", "CPU:")
    lines = text.splitlines()
    out = [ln for ln in lines if ln.startswith(keep)]
    i = next((k for k, ln in enumerate(lines) if ln.startswith("name, driver_version")), None)
    if i is not None and i + 1 < len(lines):
        out.insert(out.index(lines[i]) + 1, lines[i + 1])
    return out


def _bench_table(report: dict) -> list[str]:
    rows = ["| code | verdict | ratio | 95% interval | claimed | seconds |", "|---|---|---|---|---|---|"]
    for r in report.get("results", []):
        ratio = r.get("ratio") or {}
        value = f"{ratio['value']:.2f}x" if ratio else "-"
        band = f"{ratio['low']:.2f}x-{ratio['high']:.2f}x" if ratio else "-"
        claimed = r["claim"].get("claimed_ratio")
        rows.append(f"| {r['code']} | {r['verdict']} | {value} | {band} | "
                    f"{f'{claimed:g}x' if claimed else 'faster'} | {r.get('seconds', 0):.1f} |")
    return rows


def page(root: Path, note: str = "") -> tuple[str, dict | None]:
    out = ["# pitstop on a GPU", "",
           "Written by `python benchmarks/gpu_page.py` from one `benchmarks/gpu_check.sh` run; every number below "
           "is copied from that run's files.", ""]
    if note:
        out += [f"**Note.** {note.strip()}", ""]
    out += ["## Machine", "", "```", *_machine(root), "```", ""]
    summary = _read(root / "summary.txt")
    out += ["## The check's stages (seconds, each under its own timeout)", "", "```",
            (summary or "summary.txt missing").rstrip(), "```", ""]
    st = _read(root / "selftest.json")
    try:
        selftest = json.loads(st) if st else None
    except json.JSONDecodeError:
        selftest = None
    out += [f"## `pitstop selftest --device {(selftest or {}).get('device', '?')}`" if st else "## `pitstop selftest`", ""]
    if selftest and selftest.get("stages"):
        out += ["| stage | status | seconds | detail |", "|---|---|---|---|"]
        out += [f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {s['detail'].replace('|', '/')} |"
                for s in selftest["stages"]]
        out += ["", f"Total: {selftest.get('seconds', sum(s['seconds'] for s in selftest['stages'])):.1f} s.", ""]
    else:
        out += ["No selftest report in this run (see the stages above).", ""]
    bench_json = _read(root / "bench" / "gpu.json")
    bench = json.loads(bench_json) if bench_json else None
    out += [f"## `pitstop bench --device {(bench.get('device') or {}).get('device', '?')}`" if bench
            else "## `pitstop bench`", ""]
    if bench:
        gpu = (bench.get("device") or {}).get("gpu") or {}
        out += [f"{len(bench['results'])} benchmarks in {bench['seconds']:.1f} s (run budget {bench.get('budget')} s) "
                f"on {gpu.get('name', 'no GPU named')}.", "", *_bench_table(bench), ""]
        md = _read(root / "bench" / "gpu.md") or ""
        body = md.split("\n", 1)[1] if md.startswith("# ") else md
        out += ["### The bench's own report", "", body.strip(), ""]
    else:
        out += ["No bench report in this run (see the stages above).", ""]
    engine = _read(root / "engine" / "engine_vs_raw.md")
    out += ["## The engine against a raw loop (same recipe: bf16, channels_last, fused AdamW, compile)", "",
            engine.strip() if engine else "No engine_vs_raw output in this run (see the stages above).", ""]
    return "\n".join(out), bench


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="gpu_check.tar.gz or the folder it packed")
    p.add_argument("--page", type=Path, default=Path("docs/bench/gpu.md"))
    p.add_argument("--json", type=Path, default=Path("docs/bench/gpu.json"))
    p.add_argument("--note", default="", help="a paragraph under the title (which commit, what changed since)")
    args = p.parse_args(argv)
    if not args.source.exists():
        raise SystemExit(f"gpu_page.py: {args.source}: no such file or folder")
    with tempfile.TemporaryDirectory() as scratch:
        text, bench = page(_root(args.source, Path(scratch)), args.note)
    for target in (args.page, args.json):
        target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.page, text)
    print(f"wrote {args.page}")
    if bench is not None:
        write_atomic(args.json, json.dumps(bench, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
