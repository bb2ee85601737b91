"""``pitstop doctor --nnodes N --node-rank K --rdzv-endpoint HOST:PORT``: one doctor per node,
the nodes' partial results exchanged through the job's own rendezvous store.

Each node's doctor runs its ranks under ``torch.distributed.run`` (:func:`pitstop.doctor.run.torchrun.run_job`,
c10d rendezvous at ``HOST:PORT``) and gathers them into a :class:`NodeReport`. The exchange
uses the c10d rendezvous' own TCPStore at ``HOST:PORT``, no other server and no other port:
node 0's doctor hosts that store itself before it starts torchrun (torchrun's agents find the
port taken and join it as clients, as they do when another agent hosts it), so the store
outlives the agents and is there when the nodes report. Every other node, once its ranks are
done, sets its report under :data:`NODE_KEY` and waits for node 0 to name the job report
(:data:`REPORT_KEY`). Node 0 waits up to ``wait_s`` seconds after its own ranks ended for every
node, merges what came (:func:`merge_nodes`), and names the nodes that sent nothing: they died
or hung, the report is partial. Each doctor kills its own ranks whatever happens (torchrun.py).

``--rdzv-endpoint`` must be node 0's address (as with torchrun's c10d backend, where the host
of the endpoint hosts the store). Node reports written to disk are merged later by
``pitstop merge`` (:func:`read_node_report`, :func:`merge_nodes`). Torch is imported only to
reach the store.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pitstop.doctor.run.spec import RunResult, RunSpec
from pitstop.doctor.run.torchrun import JobResult, run_job
from pitstop.jsoncodec import dumps, record_from_json, record_to_json

__all__ = ["NodeReport", "NodeStatus", "NodesOutcome", "run_nodes", "merge_nodes", "node_report",
           "read_node_report", "parse_endpoint", "NODE_KEY", "REPORT_KEY", "NODE_WAIT_S", "NodeError"]

NODE_KEY = "pitstop-doctor/node{node}"
REPORT_KEY = "pitstop-doctor/job-report"
#: seconds node 0 waits for the other nodes after its own ranks ended (and they for node 0)
NODE_WAIT_S = 120.0
_POLL_S = 0.2


class NodeError(ValueError):
    """A node report that cannot be read or merged (one line, naming the file)."""


@dataclass(frozen=True)
class NodeReport:
    """One node's part of the job: its ranks' results (global rank order) and how its
    torchrun ended. ``rank_numbers`` aligned with ``results``."""

    node_rank: int
    nnodes: int
    host: str
    status: str
    message: str
    rank_numbers: tuple[int, ...]
    results: tuple[RunResult, ...]
    elapsed: float = 0.0
    kind: str = "pitstop-node-report"

    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeReport:
        return record_from_json(cls, d)


@dataclass(frozen=True)
class NodeStatus:
    """A node as the job report shows it: ``reported`` False when it sent nothing."""

    node_rank: int
    host: str
    status: str
    ranks: tuple[int, ...]
    message: str
    reported: bool


@dataclass
class NodesOutcome:
    """What one node's doctor ends with: the job to diagnose (node 0: every node merged; another
    node: its own part), the nodes, the ones missing, where the job report is (node 0 names it)."""

    node_rank: int
    nnodes: int
    job: JobResult
    own: NodeReport
    nodes: tuple[NodeStatus, ...] = ()
    missing: tuple[int, ...] = ()
    job_report: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return bool(self.missing) or any(n.status not in ("stopped", "exited") for n in self.nodes)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--rdzv-endpoint must be HOST:PORT, got {endpoint!r}")
    return host.strip("[]"), int(port)


def _rank_of(result: RunResult, default: int) -> int:
    obs = result.observations
    if obs is not None and obs.distributed is not None and obs.distributed.ranks:
        return obs.distributed.ranks[0].rank
    return default


def node_report(job: JobResult, node_rank: int, nnodes: int, rank_numbers: list[int] | None = None) -> NodeReport:
    """This node's part of the job, from its torchrun's results."""
    numbers = rank_numbers or [_rank_of(r, i) for i, r in enumerate(job.results)]
    return NodeReport(node_rank=node_rank, nnodes=nnodes, host=socket.gethostname(), status=job.status,
                      message=job.message, rank_numbers=tuple(numbers), results=tuple(job.results),
                      elapsed=job.elapsed)


def read_node_report(path: str | Path) -> NodeReport:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NodeError(f"{path}: cannot read a node report ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != "pitstop-node-report":
        raise NodeError(f"{path}: not a pitstop node report (written by pitstop doctor --nnodes N)")
    try:
        return NodeReport.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise NodeError(f"{path}: malformed node report ({exc})") from None


def merge_nodes(spec: RunSpec, reports: list[NodeReport], nnodes: int | None = None,
                wait_s: float | None = None) -> tuple[JobResult, tuple[NodeStatus, ...], tuple[int, ...]]:
    """The nodes' ranks as one job (global rank order), each node's status, the missing nodes."""
    n = nnodes or max([r.nnodes for r in reports] + [len(reports)])
    seen = {r.node_rank: r for r in reports}
    if len(seen) < len(reports):
        dup = sorted({r.node_rank for r in reports if sum(x.node_rank == r.node_rank for x in reports) > 1})
        raise NodeError(f"node {dup[0]} is given twice: give one report per node")
    pairs = sorted(((num, res) for rep in reports for num, res in zip(rep.rank_numbers, rep.results)),
                   key=lambda p: p[0])
    missing = tuple(k for k in range(n) if k not in seen)
    nodes = [NodeStatus(node_rank=r.node_rank, host=r.host, status=r.status, ranks=r.rank_numbers,
                        message=r.message, reported=True) for r in reports]
    why = f"sent no result within {wait_s:g} s (it died or hung)" if wait_s is not None else "no report given"
    nodes += [NodeStatus(node_rank=k, host="?", status="missing", ranks=(), message=why, reported=False)
              for k in missing]
    statuses = [r.status for r in reports]
    status = "crashed" if missing else next((s for s in ("crashed", "failed", "timeout", "interrupted")
                                              if s in statuses), "stopped")
    message = "; ".join([f"node {k} {why}: partial report" for k in missing]
                        + [f"node {r.node_rank}: {r.message}" for r in reports if r.message])
    job = JobResult(spec=spec, results=[res for _, res in pairs], status=status, message=message,
                    elapsed=max([r.elapsed for r in reports] + [0.0]))
    return job, tuple(sorted(nodes, key=lambda s: s.node_rank)), missing


def _store(host: str, port: int, *, master: bool, timeout: float) -> Any:
    from torch.distributed import TCPStore

    return TCPStore(host, port, is_master=master, wait_for_workers=False, timeout=timedelta(seconds=timeout))


def host_store(endpoint: str, timeout: float) -> tuple[Any | None, str]:
    """Node 0: host the rendezvous store at the endpoint's port (before torchrun starts)."""
    host, port = parse_endpoint(endpoint)
    try:
        return _store(host, port, master=True, timeout=timeout), ""
    except (RuntimeError, ValueError, OSError) as exc:
        return None, (f"the rendezvous port {port} is already taken ({str(exc).splitlines()[0][:80]}): "
                      "the store is joined as a client and lives only as long as its host")


def _wait_keys(store: Any, keys: list[str], deadline: float) -> list[str]:
    """The keys present by the deadline (polling: a node that never comes does not block)."""
    present: list[str] = []
    while True:
        try:
            present = [k for k in keys if store.check([k])]
        except (RuntimeError, OSError):
            return present
        if len(present) == len(keys) or time.monotonic() >= deadline:
            return present
        time.sleep(_POLL_S)


def run_nodes(spec: RunSpec, *, wait_s: float = NODE_WAIT_S, job_report: str | None = None) -> NodesOutcome:
    """Run this node's ranks and exchange the nodes' results (see the module docstring)."""
    nnodes = int(spec.nnodes)
    if not spec.rdzv_endpoint:
        raise ValueError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)")
    host, port = parse_endpoint(spec.rdzv_endpoint)
    store, note = host_store(spec.rdzv_endpoint, wait_s) if spec.node_rank == 0 else (None, "")
    job = run_job(spec)
    own = node_report(job, spec.node_rank, nnodes)
    out = NodesOutcome(node_rank=spec.node_rank, nnodes=nnodes, job=job, own=own)
    if note:
        out.notes.append(note)
    deadline = time.monotonic() + wait_s
    if spec.node_rank == 0:
        if store is None:
            try:
                store = _store(host, port, master=False, timeout=min(wait_s, 30.0))
            except (RuntimeError, OSError) as exc:
                out.notes.append(f"cannot reach the rendezvous store at {spec.rdzv_endpoint}: {exc}")
        keys = [NODE_KEY.format(node=k) for k in range(1, nnodes)]
        present = _wait_keys(store, keys, deadline) if store is not None else []
        reports = [own]
        for k in present:
            try:
                reports.append(NodeReport.from_dict(json.loads(store.get(k).decode("utf-8"))))
            except (RuntimeError, ValueError, KeyError, TypeError) as exc:
                out.notes.append(f"{k}: unreadable ({exc})")
        out.job, out.nodes, out.missing = merge_nodes(spec, reports, nnodes, wait_s)
        if store is not None and job_report:
            try:
                store.set(REPORT_KEY, f"{socket.gethostname()}:{job_report}")
                # the other nodes read it before this doctor (the store's host) exits
                _wait_keys(store, [f"{REPORT_KEY}/read{k}" for k in range(1, nnodes) if k not in out.missing],
                           time.monotonic() + min(10.0, wait_s))
            except (RuntimeError, OSError):
                pass
        out.job_report = job_report
        return out
    out.nodes = (NodeStatus(node_rank=spec.node_rank, host=own.host, status=own.status, ranks=own.rank_numbers,
                            message=own.message, reported=True),)
    try:
        store = _store(host, port, master=False, timeout=min(wait_s, 30.0))
        store.set(NODE_KEY.format(node=spec.node_rank), dumps(own.to_dict(), indent=None))
        if _wait_keys(store, [REPORT_KEY], deadline):
            out.job_report = store.get(REPORT_KEY).decode("utf-8")
            store.set(f"{REPORT_KEY}/read{spec.node_rank}", "1")
        else:
            out.notes.append(f"node 0 named no job report within {wait_s:g} s")
    except (RuntimeError, OSError) as exc:
        out.notes.append(f"node 0's rendezvous store at {spec.rdzv_endpoint} is gone or unreachable "
                         f"({str(exc).splitlines()[0][:100]}): this node's part is its own report")
    return out
