"""``pitstop selftest``: the device paths end to end, through the real commands.

One chain per device, each stage a ``python -m pitstop ...`` child (the entry point, options
and exit codes a user gets), its output checked here:

1. ``doctor``: the bundled :mod:`pitstop.examples.selftest_train` on the device, with
   ``--trace``; on CUDA with its probes, which must have measured on CUDA events;
2. ``trace``: ``pitstop trace`` on the live trace the doctor just wrote (on CPU it must say
   host-only: a CPU run has no GPU events);
3. ``compare``: ``pitstop compare`` of the doctor report with itself (no change, exit 0);
4. ``bench``: ``pitstop bench --device D`` writing its Markdown and JSON reports (on CUDA
   ``benchmarks/gpu_check.sh`` runs the selftest and ``benchmarks/gpu_page.py`` writes
   ``docs/bench/gpu.md`` from them).

Every stage is timed (``Stage.seconds``), and so is the chain (``SelftestReport.seconds``).

Without a GPU ``--device cuda`` is skipped with one reason. The result is a
:class:`SelftestReport`; ``report/selftest_text.py`` renders it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Stage", "SelftestReport", "Plan", "cuda_unavailable", "plan_for", "run_selftest", "skipped",
           "EXAMPLE"]

EXAMPLE = "pitstop.examples.selftest_train"


@dataclass(frozen=True)
class Stage:
    """One stage: ``status`` is ``ok``, ``failed`` or ``skipped``; ``detail`` says what was
    checked or what went wrong; ``files`` what it wrote."""

    name: str
    status: str
    seconds: float
    detail: str
    command: str = ""
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class SelftestReport:
    device: str
    out_dir: str
    stages: tuple[Stage, ...] = ()
    skipped: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.status != "failed" for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "out_dir": self.out_dir, "ok": self.ok, "skipped": self.skipped,
                "seconds": round(self.seconds, 2), "stages": [s.__dict__ for s in self.stages]}


@dataclass(frozen=True)
class Plan:
    """Sizes of one chain: the example's steps, the doctor's observed and warmup steps, the
    probes, and the benchmarks (codes; empty: all) in ``bench_mode``."""

    device: str
    script_steps: int
    steps: int
    warmup: int
    probes: bool
    bench_codes: tuple[str, ...] = ()
    bench_quick: bool = False
    timeout: float = 900.0


def plan_for(device: str, bench_codes: Sequence[str] | None = None) -> Plan:
    """CPU: small and quick (a few steps, no probes, one quick benchmark); CUDA: the real thing
    (probes on CUDA events, every benchmark at full size), inside 3 minutes: the bench aims at
    60 s (``pitstop bench``'s run budget), and no stage may run past ``timeout``."""
    if device == "cpu":
        return Plan("cpu", script_steps=14, steps=3, warmup=1, probes=False,
                    bench_codes=tuple(bench_codes) if bench_codes is not None else ("PIT501",), bench_quick=True)
    return Plan("cuda", script_steps=60, steps=10, warmup=3, probes=True,
                bench_codes=tuple(bench_codes or ()), bench_quick=False, timeout=150.0)


def cuda_unavailable() -> str | None:
    """Why ``--device cuda`` cannot run here (None: it can)."""
    import torch

    if torch.cuda.is_available():
        return None
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return f"no CUDA device is available (torch {torch.__version__}, {build})"


def _run(args: Sequence[str], timeout: float, stdout: Path | None = None) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "pitstop", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:g} s"
    if stdout is not None:
        stdout.write_text(proc.stdout, encoding="utf-8")
    return proc.returncode, proc.stdout, proc.stderr


def _tail(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _stage(name: str, args: list[str], plan: Plan, check: Callable[[int, str, str], tuple[bool, str]],
           stdout: Path | None = None, files: Sequence[Path] = ()) -> Stage:
    t0 = time.perf_counter()
    rc, out, err = _run(args, plan.timeout, stdout)
    try:
        ok, detail = check(rc, out, err)
    except Exception as exc:  # a malformed output is this stage's failure, not the selftest's
        ok, detail = False, f"unexpected output ({type(exc).__name__}: {exc}); exit {rc}: {_tail(err)}"
    return Stage(name, "ok" if ok else "failed", time.perf_counter() - t0, detail,
                 "pitstop " + " ".join(args), tuple(str(f) for f in files if f.exists()))


def _doctor_check(plan: Plan) -> Callable[[int, str, str], tuple[bool, str]]:
    def check(rc: int, out: str, err: str) -> tuple[bool, str]:
        d = _json(out)
        if rc != 0 or d is None:
            return False, f"exit {rc}: {_tail(err)}"
        problems = []
        if d.get("outcome") != "diagnosed":
            problems.append(f"outcome {d.get('outcome')!r}")
        dev = (d.get("device") or {}).get("type")
        if dev != plan.device:
            problems.append(f"trained on {dev!r}, not {plan.device!r}")
        if not d.get("trace") or not Path(d["trace"]).is_file():
            problems.append("no trace written")
        clocks = sorted({p.get("measure") for p in (d.get("probes") or {}).values() if p.get("measure")})
        if plan.probes and clocks != ["gpu"]:
            problems.append(f"probes measured on {clocks or 'nothing'}, expected CUDA events (gpu)")
        if problems:
            return False, "; ".join(problems)
        steps = (d.get("steps") or {}).get("observed")
        probes = f", probes on CUDA events ({len(d.get('probes') or {})})" if plan.probes else ""
        return True, f"diagnosed {steps} steps on {(d.get('device') or {}).get('name')}{probes}; trace {d['trace']}"
    return check


def _trace_check(plan: Plan) -> Callable[[int, str, str], tuple[bool, str]]:
    def check(rc: int, out: str, err: str) -> tuple[bool, str]:
        if rc not in (0, 1):  # 1: findings
            return False, f"exit {rc}: {_tail(err)}"
        d = _json(out)
        if d is None:
            return False, "no JSON on stdout"
        text = json.dumps(d)
        host_only = "host-only" in text or "host only" in text
        if plan.device == "cpu" and not host_only:
            return False, "a CPU trace was not reported as host-only"
        if plan.device == "cuda" and host_only:
            return False, "the CUDA trace was read as host-only (no GPU events found)"
        return True, "host-only trace, read cleanly" if host_only else "GPU trace read: steps and kernels found"
    return check


def _compare_check(rc: int, out: str, err: str) -> tuple[bool, str]:
    d = _json(out)
    if rc != 0 or d is None:
        return False, f"exit {rc}: {_tail(err)}"
    verdict = (d.get("step") or {}).get("verdict", "")
    if not verdict.startswith("no change"):
        return False, f"a report against itself: {verdict!r}"
    return True, f"the report against itself: {verdict}"


def _bench_check(md: Path) -> Callable[[int, str, str], tuple[bool, str]]:
    def check(rc: int, out: str, err: str) -> tuple[bool, str]:
        if rc != 0:
            return False, f"exit {rc}: {_tail(err)}"
        codes = sorted({ln.split("|")[1].strip() for ln in out.splitlines() if ln.startswith("| PIT") and "**" in ln})
        return bool(codes), f"{len(codes)} benchmark verdict(s) ({', '.join(codes)}) written to {md}" if codes \
            else "no benchmark verdict in the output"
    return check


def run_selftest(plan: Plan, out_dir: Path, bench_out: Path | None = None,
                 on_stage: Callable[[Stage], None] | None = None) -> SelftestReport:
    """Run the chain of ``plan`` into ``out_dir``; the bench's Markdown goes to ``bench_out``
    (default ``out_dir/bench-<device>.md``; its JSON beside it). A failed stage does not stop
    the ones that do not need its output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    trace_dir, report = out_dir / "trace", out_dir / "doctor.json"
    stages: list[Stage] = []

    def add(stage: Stage) -> Stage:
        stages.append(stage)
        if on_stage is not None:
            on_stage(stage)
        return stage

    doctor_args = ["doctor", "-m", EXAMPLE, "--steps", str(plan.steps), "--warmup", str(plan.warmup),
                   "--format", "json", "--trace", str(trace_dir), "--timeout", str(plan.timeout)]
    doctor_args += [] if plan.probes else ["--no-probes"]
    doctor_args += ["--", "--device", plan.device, "--steps", str(plan.script_steps)]
    doctor = add(_stage("doctor", doctor_args, plan, _doctor_check(plan), stdout=report, files=[report, trace_dir]))
    if doctor.status == "ok":
        add(_stage("trace", ["trace", str(trace_dir), "--format", "json"], plan, _trace_check(plan),
                   stdout=out_dir / "trace.json", files=[out_dir / "trace.json"]))
        add(_stage("compare", ["compare", str(report), str(report), "--format", "json", "--fail-over", "0"], plan,
                   _compare_check, stdout=out_dir / "compare.json", files=[out_dir / "compare.json"]))
    else:
        for name in ("trace", "compare"):
            add(Stage(name, "skipped", 0.0, "the doctor stage failed: no report or trace to read"))
    md = bench_out or out_dir / f"bench-{plan.device}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    bench_json = md.with_suffix(".json")
    bench_args = ["bench", *plan.bench_codes, "--device", plan.device, "--format", "markdown", "--json", str(bench_json)]
    bench_args += ["--quick"] if plan.bench_quick else []
    add(_stage("bench", bench_args, plan, _bench_check(md), stdout=md, files=[md, bench_json]))
    return SelftestReport(plan.device, str(out_dir), tuple(stages), seconds=time.perf_counter() - started)


def skipped(device: str, out_dir: Path, reason: str) -> SelftestReport:
    """The report of a chain that could not run here (``reason``: why)."""
    return SelftestReport(device, str(out_dir), (), reason)

