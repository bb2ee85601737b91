"""``pitstop doctor --nproc-per-node N``: real 2-rank gloo jobs under torch.distributed.run
(issue 21). Every test launches torchrun; the fixtures are plain DDP scripts."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, default_signals

from pitstop.doctor.analysis.job import diagnose_job
from pitstop.doctor.run.spec import RunSpec
from pitstop.doctor.run.torchrun import run_job
from pitstop.report.doctor_html import doctor_html
from pitstop.report.doctor_terminal import render
from pitstop.jsoncodec import dumps

pytestmark = pytest.mark.slow

FIX = ROOT / "tests" / "fixtures" / "ddp"
TRAIN = str(FIX / "train.py")
DIST_CODES = ("PIT702", "PIT703", "PIT704")
SCHEMA = json.loads((ROOT / "docs" / "doctor-schema.json").read_text(encoding="utf-8"))


def _job(*args: str, script: str | None = TRAIN, module: str | None = None, cwd: str | None = None,
         steps: int = 6, timeout: float = 240.0):
    spec = RunSpec(script=None if module else script, module=module, cwd=cwd, args=args, steps=steps, warmup=2,
                   timeout=timeout, nproc_per_node=2, stdout="devnull")
    return diagnose_job(run_job(spec))


def _codes(diag, code: str) -> list:
    return [f for f in diag.findings if f.code == code]


def test_a_plain_run_reports_one_rank_of_one():
    from pitstop.doctor.analysis.diagnosis import diagnose
    from pitstop.doctor.run.spec import RunResult, StepRecord

    steps = [StepRecord(index=i, kind="observed", wall=0.1, phases={"forward": 0.04}) for i in range(3)]
    obs = {"steps_observed": 3, "step_time": {"median": 0.1, "p90": 0.1, "mean": 0.1},
           "breakdown": {"forward": 0.04, "other": 0.06}, "batch_size": 8}
    from pitstop.doctor.analysis.observations import Observations

    result = RunResult(spec=RunSpec(script=TRAIN), status="stopped", steps=steps,
                       observations=Observations.from_dict(obs))
    d = diagnose(result).to_dict()
    assert d["world_size"] == 1 and d["stragglers"] == []
    (r,) = d["ranks"]
    assert r["rank"] == 0 and r["step_time"]["median"] == 0.1 and r["samples_per_s"] == pytest.approx(80.0)
    assert "collective" not in r["breakdown"] and r["collective_wait"] is None
    assert not [s for s in d["skipped_checks"] if "torchrun job" in s["reason"]]  # job checks stay out of it


def test_planted_straggler_is_named_with_its_phase_and_a_sampler_without_set_epoch_is_found():
    """One job, two planted problems whose findings are independent (PIT704 reads the ranks'
    step phases, PIT703's epoch check the epochs each rank's sampler started): rank 1 loads
    slowly, and the DistributedSampler never gets set_epoch."""
    diag = _job("--slow-rank", "1", "--sampler")
    d = diag.to_dict()
    assert d["outcome"] == "diagnosed" and d["world_size"] == 2
    assert d["stragglers"] == [1]
    (f,) = [f for f in _codes(diag, "PIT704") if "straggler" in f.title]
    assert "rank 1" in f.title and "data phase" in f.title
    r0, r1 = d["ranks"]
    assert r1["breakdown"]["data"] > 0.05 > r0["breakdown"]["data"]
    assert r0["breakdown"]["collective"] > 0.05  # rank 0 waits for rank 1 in DDP's all-reduce
    # the sampler without set_epoch: found, and not mistaken for identical batches
    titles = [f.title for f in _codes(diag, "PIT703")]
    assert any("set_epoch" in t for t in titles) and not any("identical" in t for t in titles)
    assert _codes(diag, "PIT702") == []  # no accumulation: one all-reduce round per step is no finding

def test_balanced_clean_job_has_no_distributed_finding_and_no_sync_accumulation_all_reduces_once():
    """A correct DDP job (DistributedSampler with set_epoch, balanced ranks) accumulating 4
    micro-batches under no_sync: no distributed finding, and one all-reduce round per optimizer
    step after 4 backwards."""
    diag = _job("--accum", "4", "--no-sync", "--sampler", "--set-epoch", steps=8)
    d = diag.to_dict()
    jsonschema.validate(json.loads(dumps(d)), SCHEMA)
    assert d["outcome"] == "diagnosed"
    assert d["stragglers"] == []
    assert [f.title for f in diag.findings if f.code in DIST_CODES] == []
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    for r in d["ranks"]:
        assert r["step_time"]["steps"] == 8 and r["samples_per_s"] > 0
        assert r["allreduce_rounds_per_step"] == 1 and r["allreduce_bytes_per_step"] > 0
    job = diag.observations.distributed
    assert job.initialized and all(r.backend == "gloo" for r in job.ranks)
    assert all(set(r.reductions) == {1} and set(r.backwards) == {4} for r in job.ranks)
    assert "bucket_sizes" in job.ranks[0].ddp_logging  # DDP's own logging data
    page = doctor_html(diag)
    assert "2 ranks side by side" in page and "rank 1" in page
    out = io.StringIO()
    render(diag, file=out)
    assert "2 ranks side by side" in out.getvalue() and "collective (mean)" in out.getvalue()
    skipped = {(s.code, s.check) for s in diag.skipped}
    assert ("PIT702", "DdpNoSyncCheck") not in skipped and ("PIT704", "StragglerCheck") not in skipped

def test_a_lightning_fabric_ddp_job_is_diagnosed_per_rank():
    """Fabric's own DDP strategy under torchrun (gloo): recognised as Fabric, every rank
    diagnosed, DDP's reduction timed; Fabric put a DistributedSampler in the loader, so no
    PIT703 (the ranks get different batches)."""
    diag = _job("--devices", "2", "--strategy", "ddp", "--steps", "1000",
                script=str(ROOT / "tests" / "fixtures" / "frameworks" / "fabric_loop.py"), steps=6)
    d = diag.to_dict()
    jsonschema.validate(json.loads(dumps(d)), SCHEMA)
    assert d["outcome"] == "diagnosed" and d["world_size"] == 2
    assert d["framework"]["name"] == "fabric"
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert all(r["allreduce_rounds_per_step"] == 1 for r in d["ranks"])
    assert _codes(diag, "PIT703") == [] and _codes(diag, "PIT702") == []


def test_an_accelerate_job_is_diagnosed_per_rank():
    """Accelerate under torchrun (Accelerator(cpu=True) joins the job from its environment):
    recognised, both ranks diagnosed, one reduction round per step, and no PIT703 (Accelerate
    shards the loader, so the ranks get different batches)."""
    diag = _job("--steps", "1000", script=str(ROOT / "tests" / "fixtures" / "frameworks" / "accelerate_loop.py"),
                steps=6)
    d = diag.to_dict()
    assert d["outcome"] == "diagnosed" and d["world_size"] == 2
    assert d["framework"]["name"] == "accelerate"
    assert all(r["allreduce_rounds_per_step"] == 1 for r in d["ranks"])
    assert _codes(diag, "PIT703") == [] and _codes(diag, "PIT702") == []


def test_script_without_init_process_group_is_independent_processes():
    diag = _job(module="independent", cwd=str(FIX))  # -m MODULE, from its directory
    d = diag.to_dict()
    assert d["outcome"] == "diagnosed" and d["world_size"] == 2
    assert "2 independent processes" in d["message"]
    assert any("never called torch.distributed.init_process_group" in n for n in d["notes"])
    assert [f for f in diag.findings if f.code in DIST_CODES] == []
    # one finding per problem, naming the ranks (each rank is diagnosed alone, then merged)
    keys = [(f.code, f.where) for f in diag.findings]
    assert len(keys) == len(set(keys))


def test_a_crash_in_rank_1_ends_the_job_with_its_traceback():
    diag = _job("--crash-rank", "1", "--sampler", "--set-epoch")
    d = diag.to_dict()
    assert d["outcome"] == "script_failed" and d["exit_code"] == 3
    assert d["message"].startswith("rank 1:")
    assert "planted crash on rank 1" in d["traceback"]


def test_a_hang_in_a_collective_ends_at_the_timeout_naming_the_waiting_rank():
    # 40 s: both ranks must be past their start (torch import, gloo rendezvous, warmup) and rank 0
    # inside step 4's all-reduce before the timeout; with 25 s and other torchrun jobs sharing the
    # 2 cores, the report once named no waiting rank (2 observed steps done)
    diag = _job("--hang-rank", "1", "--sampler", "--set-epoch", timeout=40.0)
    d = diag.to_dict()
    assert d["outcome"] == "timeout" and d["exit_code"] == 4
    assert "ranks waiting inside a collective: 0 (DDP gradient all-reduce" in d["message"]
    assert "the others waited for): 1" in d["message"]


def _marked(mark: str) -> list[int]:
    """Processes (ours) whose environment carries ``mark``: agent, ranks, DataLoader workers."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                env = (entry / "environ").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if mark.encode() in env and stat.split(") ")[1][0] != "Z":
                found.append(int(entry.name))
    return found


def _steps_done(doctor_pid: int) -> list[int]:
    """Optimizer steps each rank's progress snapshot reports (warmup included)."""
    done = []
    for d in Path(tempfile.gettempdir()).glob(f"pitstop-doctor-{doctor_pid}-*"):
        for snap in sorted(d.glob("rank*.json.partial")):
            try:
                done.append(len(json.loads(snap.read_text())["steps"]))
            except (OSError, ValueError, KeyError):
                done.append(0)
    return done


def test_sigterm_to_the_doctor_ends_every_rank_and_writes_a_partial_report(tmp_path):
    mark = f"pitstop-ddp-test-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PITSTOP_TEST_MARK": mark}
    proc = subprocess.Popen(default_signals([sys.executable, "-m", "pitstop", "doctor", "--nproc-per-node", "2",
                                             "--steps", "100000", "--format", "json", TRAIN, "--", "--sampler",
                                             "--set-epoch", "--workers", "1", "--slow-rank", "1"]),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # both ranks observed steps (their progress snapshots say so)
            if _steps_done(proc.pid) >= [4, 4] and len(_marked(mark)) >= 5:  # agent, 2 ranks, 2 workers
                break
            time.sleep(0.5)
        else:
            pytest.fail("the job did not start")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    d = json.loads(out)
    assert d["outcome"] == "interrupted" and "partial report" in d["message"]
    assert d["world_size"] == 2 and all(r["step_time"] and r["step_time"]["steps"] > 0 for r in d["ranks"])
    deadline = time.monotonic() + 30
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked(mark) == []


def test_identical_batches_accumulation_without_no_sync_and_a_traced_job_is_one_file_per_rank(tmp_path):
    """One job (no sampler, 4 micro-batches without ``no_sync``, ``--trace DIR``), three
    independent behaviours: the doctor finds that every rank trained on the same batches (the
    loader shuffles with the same seed on every rank: PIT703, from the batches); that DDP
    all-reduced after every micro-batch (PIT702, from the reductions counted per step); and
    ``--nproc-per-node 2 --trace DIR`` (refused before the GPU run of issue 27 needed it): each
    rank keeps its own traced steps, and ``pitstop trace DIR`` reads the folder as that job."""
    from pitstop.trace import trace

    spec = RunSpec(script=TRAIN, args=("--accum", "4"), steps=4, warmup=1, timeout=240.0, nproc_per_node=2,
                   stdout="devnull", trace_dir=str(tmp_path / "traces"))
    diag = diagnose_job(run_job(spec))
    assert diag.to_dict()["world_size"] == 2
    (f,) = [f for f in _codes(diag, "PIT703") if "identical batches" in f.title]
    assert f.severity == "high" and "RandomSampler" in f.evidence
    (f,) = _codes(diag, "PIT702")
    assert "4 times per optimizer step" in f.title
    assert "4.0 gradient all-reduce rounds" in f.evidence and f.impact_seconds > 0
    assert all(r.reductions == (4,) * len(r.reductions) for r in diag.observations.distributed.ranks)
    files = sorted(p.name for p in (tmp_path / "traces").iterdir())
    assert files == ["pitstop_trace_rank0.json", "pitstop_trace_rank1.json"]
    report = trace([tmp_path / "traces"], workers=1)
    assert [r.rank for r in report.ranks] == [0, 1] and all(r.steps >= 1 for r in report.ranks)
