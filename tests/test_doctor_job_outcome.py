"""How a torchrun job's per-rank results become one outcome (torch-free, no job started).

The races these pin were seen live: a hanging rank's watchdog ends first at the timeout, its
exit closes the gloo connection under the rank waiting in the all-reduce, and that rank raises
"Connection closed by peer". The job timed out; it did not fail.
"""

from __future__ import annotations

from pitstop.doctor.analysis.dist_records import JobRecord, RankDist
from pitstop.doctor.analysis.job import diagnose_job
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.run.spec import RunResult, RunSpec
from pitstop.doctor.run.torchrun import JobResult

SPEC = RunSpec(script="train.py", steps=6, warmup=2, timeout=40.0, nproc_per_node=2)
PEER_TB = ("Traceback (most recent call last):\n  ...\nRuntimeError: [gloo/transport/tcp/pair.cc:553] "
           "Connection closed by peer [127.0.0.1]:28047.\n")
OWN_TB = "Traceback (most recent call last):\n  ...\nValueError: planted crash on rank 0\n"


def _rank(rank: int, status: str, *, tb: str | None = None, waiting: str | None = None,
          elapsed: float = 40.0) -> RunResult:
    dist = RankDist(rank=rank, world_size=2, initialized=True, backend="gloo", waiting_in=waiting,
                    waiting_s=30.0 if waiting else None)
    obs = Observations(distributed=JobRecord(world_size=2, ranks=(dist,)))
    return RunResult(spec=SPEC, status=status, traceback=tb, elapsed=elapsed, observations=obs,
                     message=f"rank said {status}")


def _outcome(*results: RunResult, status: str = "stopped") -> dict:
    return diagnose_job(JobResult(spec=SPEC, results=list(results), status=status, returncode=1)).to_dict()


def test_a_peer_closed_failure_after_another_ranks_timeout_is_the_timeout():
    d = _outcome(_rank(0, "error", tb=PEER_TB, waiting="DDP gradient all-reduce"), _rank(1, "timeout"))
    assert d["outcome"] == "timeout" and d["exit_code"] == 4
    assert "ranks waiting inside a collective: 0 (DDP gradient all-reduce" in d["message"]
    assert "the others waited for): 1" in d["message"]


def test_a_rank_that_failed_on_its_own_stays_the_root_cause_beside_a_timeout():
    d = _outcome(_rank(0, "error", tb=OWN_TB), _rank(1, "timeout"))
    assert d["outcome"] == "script_failed" and d["message"].startswith("rank 0:")


def test_a_peer_closed_failure_without_any_timeout_is_a_failure():
    # the peer's going away is all there is to report: the job failed
    d = _outcome(_rank(0, "error", tb=PEER_TB), _rank(1, "stopped"))
    assert d["outcome"] == "script_failed"


def test_among_failures_the_one_not_caused_by_a_peer_is_named():
    d = _outcome(_rank(0, "error", tb=PEER_TB, elapsed=5.0), _rank(1, "error", tb=OWN_TB, elapsed=6.0))
    assert d["outcome"] == "script_failed" and d["message"].startswith("rank 1:")


def test_a_failure_that_names_gloo_stays_the_failure_when_torchrun_stopped_the_other_rank():
    # rank 1's own error mentions gloo; torchrun then sent SIGTERM to rank 0 (its report says
    # interrupted), while the job itself was not interrupted: the job failed, rank 1 is named
    gloo_tb = "Traceback (most recent call last):\n  ...\nRuntimeError: gloo backend needs a device\n"
    d = _outcome(_rank(0, "interrupted"), _rank(1, "error", tb=gloo_tb))
    assert d["outcome"] == "script_failed" and d["message"].startswith("rank 1:")
