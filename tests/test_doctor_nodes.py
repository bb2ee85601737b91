"""``pitstop doctor --nnodes 2``: two nodes on one machine (two doctor processes, a c10d
rendezvous on 127.0.0.1, two gloo ranks each), exchanging through the rendezvous store
(issue 30). Every test launches real torchrun jobs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow

TRAIN = str(ROOT / "tests" / "fixtures" / "ddp" / "train.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _doctor(tmp: Path, node: int, port: int, *script_args: str, wait: float = 60.0,
            env_extra: dict[str, str] | None = None, steps: int = 6, nproc: int = 2) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pitstop", "doctor", "--nnodes", "2", "--node-rank", str(node),
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-backend", "c10d", "--nproc-per-node", str(nproc),
           "--steps", str(steps), "--warmup", "2", "--timeout", "150", "--node-wait", str(wait), "--format", "json",
           "--node-report", str(tmp / f"node{node}.json"), "--job-report", str(tmp / "job.json"),
           TRAIN, "--", *script_args]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env_extra or {}))
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _start_both(tmp: Path, *script_args: str, wait: float = 60.0, node1_env: dict[str, str] | None = None,
                steps: int = 6, nproc: int = 2) -> tuple[subprocess.Popen, subprocess.Popen]:
    port = _free_port()
    n0 = _doctor(tmp, 0, port, *script_args, wait=wait, steps=steps, nproc=nproc)
    deadline = time.monotonic() + 60
    while not _listening(port) and time.monotonic() < deadline and n0.poll() is None:
        time.sleep(0.2)  # node 0 hosts the rendezvous store before its torchrun starts
    return n0, _doctor(tmp, 1, port, *script_args, wait=wait, env_extra=node1_env, steps=steps, nproc=nproc)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def test_two_nodes_one_job_report_names_the_culprit_on_node_1(tmp_path):
    # node 1's local rank 1 is slow (its global rank is the rendezvous' choice)
    n0, n1 = _start_both(tmp_path, "--slow-local-rank-from-env", "PLANT_SLOW_LOCAL_RANK", "--sampler", "--set-epoch",
                         node1_env={"PLANT_SLOW_LOCAL_RANK": "1"})
    out0, err0 = n0.communicate(timeout=400)
    out1, err1 = n1.communicate(timeout=60)
    assert n0.returncode == 0, err0[-3000:]
    assert n1.returncode == 0, err1[-3000:]
    job = json.loads((tmp_path / "job.json").read_text())
    d = job["diagnosis"]
    assert d["world_size"] == 4 and [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    node1 = json.loads((tmp_path / "node1.json").read_text())
    planted = [num for num, res in zip(node1["rank_numbers"], node1["results"])
               if res["observations"]["distributed"]["ranks"][0]["local_rank"] == 1]
    assert len(planted) == 1
    culprit = planted[0]
    assert d["stragglers"] == [culprit]
    (f,) = [f for f in d["findings"] if f["code"] == "PIT704"]
    assert f"rank {culprit}" in f["title"] and "data phase" in f["title"]
    assert [n["node_rank"] for n in job["nodes"]] == [0, 1] and job["missing_nodes"] == []
    assert sorted(job["nodes"][0]["ranks"] + job["nodes"][1]["ranks"]) == [0, 1, 2, 3]
    # node 1 printed its own part and where the job report is; node 0 the job
    assert json.loads(out1)["world_size"] == 4 and len(json.loads(out1)["ranks"]) == 2
    assert str(tmp_path / "job.json") in err1 and "job report (every node)" in err1
    assert len(json.loads(out0)["ranks"]) == 4
    # pitstop merge rebuilds the same job from the two node reports written to disk
    merged = subprocess.run([sys.executable, "-m", "pitstop", "merge", str(tmp_path / "node0.json"),
                             str(tmp_path / "node1.json"), "--format", "json"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=120)
    m = json.loads(merged.stdout)
    assert [r["rank"] for r in m["ranks"]] == [0, 1, 2, 3] and m["stragglers"] == [culprit]


def test_a_node_killed_mid_run_ends_the_job_with_a_partial_report_and_no_orphan(tmp_path):
    # 400 steps with node 1's rank loading 100 ms per batch: the job cannot end before the kill
    # (with 6 quick steps it could on a quiet machine, and node 1 then reported before it died).
    # One rank per node: what is tested is the node's death (two ranks per node only cost ~8 s of
    # CPU more; the job of four ranks is the test above)
    n0, n1 = _start_both(tmp_path, "--slow-local-rank-from-env", "PLANT_SLOW_LOCAL_RANK", "--sampler", "--set-epoch",
                         "--epochs", "1000", wait=15.0, node1_env={"PLANT_SLOW_LOCAL_RANK": "0"}, steps=400, nproc=1)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(_descendants(n1.pid)) < 2:
        time.sleep(0.5)  # node 1's torchrun agent and its rank are up
    time.sleep(12)  # they joined the job and train
    family = _descendants(n1.pid) | _descendants(n0.pid)
    assert n0.poll() is None and n1.poll() is None
    os.kill(n1.pid, signal.SIGKILL)  # the whole node goes away: no report from it
    n1.wait(timeout=30)
    out0, err0 = n0.communicate(timeout=300)
    job = json.loads((tmp_path / "job.json").read_text())
    assert job["missing_nodes"] == [1]
    missing = [n for n in job["nodes"] if n["node_rank"] == 1][0]
    assert missing["status"] == "missing" and not missing["reported"]
    assert len(job["diagnosis"]["ranks"]) == 1  # node 0's rank
    assert "PARTIAL: node 1" in err0
    assert n0.returncode != 0
    time.sleep(2)
    assert _alive(family | _descendants(n0.pid)) == set()


def test_merge_refuses_what_is_not_a_node_report(tmp_path):
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": []}')
    r = subprocess.run([sys.executable, "-m", "pitstop", "merge", str(bad)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), timeout=120)
    assert r.returncode == 2 and "not a pitstop node report" in r.stderr and str(bad) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_merged_nodes_name_the_missing_one():
    from pitstop.doctor.run.nodes import NodeReport, merge_nodes
    from pitstop.doctor.run.spec import RunResult, RunSpec

    spec = RunSpec(script=TRAIN, nproc_per_node=2)
    part = NodeReport(node_rank=0, nnodes=3, host="a", status="stopped", message="", rank_numbers=(1, 0),
                      results=(RunResult(spec=spec, status="stopped"), RunResult(spec=spec, status="stopped")))
    job, nodes, missing = merge_nodes(spec, [part], 3, wait_s=5)
    assert missing == (1, 2) and job.status == "crashed" and "node 1 sent no result within 5 s" in job.message
    assert [n.reported for n in nodes] == [True, False, False]
    assert NodeReport.from_dict(part.to_dict()) == part
