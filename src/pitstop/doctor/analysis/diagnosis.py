"""From a :class:`RunResult` to a :class:`Diagnosis`: run every registered check (torch-free).

The mechanism knows no tip by name: it asks ``catalog.implementations("D")`` (which
discovers the tip modules), runs each check on the observations, ranks the findings and records
which checks were skipped and why. :meth:`Diagnosis.to_dict` is the ``--format json``
schema (documented in the README).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pitstop.doctor.analysis.check import Check, Finding, Thresholds, in_framework_terms
from pitstop.doctor.analysis.fits import MemoryFit, assess
from pitstop.doctor.analysis.fidelity import Fidelity, fidelity_of, lowered
from pitstop.doctor.analysis.observations import PHASES, Observations
from pitstop.doctor.analysis.probe import gate_note
from pitstop.doctor.analysis.records import FrameworkRecord, Overhead
from pitstop.doctor.run.spec import RunResult
from pitstop.doctor.analysis.rankviews import rank_view
from pitstop.findings import one_claim
from pitstop.jsoncodec import to_json
from pitstop.ranks import RankView
from pitstop.severity import settle
from pitstop.doctor.analysis.evidence import GpuSummary, gpu_findings, gpu_summary, merge, profiled_window

__all__ = ["Diagnosis", "SkippedCheck", "Throughput", "PrecisionSeen", "diagnose", "overhead_note", "EXIT_CODES",
           "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

#: ``pitstop doctor`` exit codes (documented in the README).
EXIT_CODES = {
    "diagnosed": 0,       # at least one observed step; findings or not
    "usage": 2,           # bad options, missing script/module, syntax error
    "script_failed": 3,   # the script raised, exited non-zero, a setup failed, or the child crashed
    "timeout": 4,         # the script hung past --timeout and was killed (partial report)
    "nothing": 5,         # no observed optimizer step: nothing to diagnose
    "interrupted": 130,   # Ctrl-C (SIGTERM: 143, 128 + the signal) stopped a torchrun job (partial report)
}


@dataclass(frozen=True)
class SkippedCheck:
    """A check that did not apply to this run (its tip ``code``, class name and why)."""

    code: str
    check: str
    reason: str


@dataclass(frozen=True)
class Throughput:
    """Steps, samples and tokens per second of the observed steps, and how the batch was read
    (``throughput`` of the JSON document)."""

    steps_per_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    batch_size: int | None = None
    batch_dim: int | None = None
    batch_how: str | None = None
    samples_per_step: int | None = None
    micro_batches_per_step: float | None = None
    step_boundary: str | None = None


@dataclass(frozen=True)
class PrecisionSeen:
    """What the training forwards really ran under: the autocast dtype seen by the model's
    layers in most training forwards ("none", "bfloat16", "float16"; None when no training
    forward was seen), the forwards per autocast dtype, and the parameters' dtype."""

    autocast: str | None = None
    autocast_forwards: dict[str, int] = field(default_factory=dict)
    param_dtype: str | None = None


@dataclass
class Diagnosis:
    result: RunResult
    observations: Observations
    findings: list[Finding] = field(default_factory=list)
    skipped: list[SkippedCheck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    thresholds: Thresholds = field(default_factory=Thresholds)
    #: probe key -> why its measured gain gave no finding (below ``thresholds.probe_speedup``)
    probe_notes: dict[str, str] = field(default_factory=dict)
    #: a torchrun job (``doctor/analysis/job.py``): its size, one view per rank (rank order), each
    #: rank's status and message, the stragglers' rank numbers, the interrupting signal
    world_size: int = 1
    rank_views: list[RankView] = field(default_factory=list)
    rank_status: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)
    signum: int | None = None
    #: what fits in the device's memory or ``--memory-budget`` (``doctor/analysis/fits.py``)
    memory_fit: MemoryFit | None = None
    #: whether the doctor measured the program the user runs, in the user's seconds (profiled
    #: window against the observed step, compiled calls with and without its hooks)
    fidelity: Fidelity = field(default_factory=Fidelity)

    # -- verdict ------------------------------------------------------------------------
    @property
    def outcome(self) -> str:
        st = self.result.status
        if st == "interrupted":
            return "interrupted"
        if st == "timeout":
            return "timeout"
        if st in ("error", "setup_error", "crashed") or (st == "exited" and self.result.exit_code not in (0, None)):
            return "script_failed"
        if not self.result.observed:
            return "nothing"
        return "diagnosed"

    @property
    def exit_code(self) -> int:
        if self.outcome == "interrupted" and self.signum:
            return 128 + self.signum
        return EXIT_CODES[self.outcome]

    @property
    def headline(self) -> str:
        r, o = self.result, self.observations
        n, planned = len(r.observed), r.spec.steps
        if self.outcome == "nothing":
            return "nothing to diagnose: " + self.seen()
        if self.outcome in ("timeout", "interrupted"):
            return f"{r.message}; partial report of {n} observed steps"
        if self.outcome == "script_failed":
            oom = f"out of memory ({r.oom.where}): " if r.oom is not None else ""
            return f"{oom}{r.message}; report of what was measured before ({n} observed steps)"
        if n < planned:
            return f"{r.message}: partial report, {n} of {planned} planned steps observed"
        on = o.device_name or r.device
        if self.world_size > 1:
            job = o.distributed
            how = "ranks" if job is None or job.initialized else "independent processes (no init_process_group)"
            on = f"{self.world_size} {how}, each on {on}"
        return f"diagnosed {n} steps of {r.spec.target} on {on}"

    def seen(self) -> str:
        """What the run did see, for the "nothing to diagnose" message."""
        r, o = self.result, self.observations
        n_fw = o.forwards.total
        parts = [f"{len(r.steps)} optimizer steps ({len(r.observed)} observed after {r.spec.warmup} warmup)",
                 f"{n_fw} forward passes of {len(o.models)} model(s) with parameters",
                 f"{o.backward_calls} backward calls", f"{len(o.loaders)} DataLoader(s) iterated"]
        why = r.message or r.status
        return f"{why}; seen: " + ", ".join(parts) + (
            ". The doctor measures training steps: the script must call optimizer.step() "
            f"more than --warmup ({r.spec.warmup}) times." if not r.observed else "")

    # -- numbers ----------------------------------------------------------------------------
    @property
    def throughput(self) -> Throughput:
        o = self.observations
        sps = 1.0 / o.mean_step if o.mean_step else None
        b = o.batch
        samples = (b.samples_per_step if b else None) or o.batch_size
        tokens = b.tokens_per_step if b else None
        return Throughput(steps_per_s=sps, samples_per_s=sps * samples if sps and samples else None,
                          tokens_per_s=sps * tokens if sps and tokens else None,
                          batch_size=o.batch_size, batch_dim=b.dim if b else None, batch_how=b.how if b else None,
                          samples_per_step=samples, micro_batches_per_step=b.micro_batches_per_step if b else None,
                          step_boundary=o.step_boundary)

    def summary(self) -> dict[str, Any]:
        """:attr:`throughput` as JSON values."""
        return to_json(self.throughput)

    def breakdown(self) -> dict[str, dict[str, float]]:
        o = self.observations
        return {ph: {"seconds": o.seconds(ph), "share": o.share(ph)} for ph in PHASES if o.breakdown}

    @property
    def framework_seen(self) -> FrameworkRecord:
        """The detected training framework (``name`` None: a plain PyTorch loop)."""
        return self.observations.framework or FrameworkRecord()

    def framework(self) -> dict[str, Any]:
        """:attr:`framework_seen` as JSON values."""
        return to_json(self.framework_seen)

    @property
    def precision_seen(self) -> PrecisionSeen:
        o = self.observations
        ac = {k: v for k, v in o.forwards.autocast.items() if v}
        return PrecisionSeen(autocast=max(ac, key=ac.__getitem__) if ac else None, autocast_forwards=ac,
                             param_dtype=o.model.param_dtype if o.model else None)

    def precision(self) -> dict[str, Any]:
        """:attr:`precision_seen` as JSON values."""
        return to_json(self.precision_seen)

    @property
    def gpu(self) -> GpuSummary | None:
        """The GPU section: the profiled steps' busy, idle by cause, top kernels (CUDA runs)."""
        return gpu_summary(self.observations.gpu, fid=self.fidelity)

    def syncs_per_step(self) -> float:
        n = max(len(self.result.observed), 1)
        return sum(s.calls for s in self.observations.syncs) / n

    def ranks(self) -> list[RankView]:
        """One view per rank (a single process is rank 0 of 1)."""
        return self.rank_views or [rank_view(self.observations)]

    def rank_outcome(self, rank: int) -> tuple[str, str]:
        """(status, message) of one rank of the job (the run's own where the job did not say)."""
        st = next((d for d in self.rank_status if d["rank"] == rank), {})
        return st.get("status", self.result.status), st.get("message", self.result.message)

    def rank_allreduce(self, rank: int) -> tuple[float, float] | None:
        """(bytes, rounds) one rank all-reduced per observed step (means), or None when the
        job holds no distributed record of that rank."""
        job = self.observations.distributed
        dist = next((r for r in job.ranks if r.rank == rank), None) if job is not None else None
        return (dist.mean("allreduce_bytes"), dist.mean("reductions")) if dist is not None else None

    def ranks_json(self) -> list[dict[str, Any]]:
        out = []
        for v in self.ranks():
            st = v.step_time
            status, message = self.rank_outcome(v.rank)
            ar = self.rank_allreduce(v.rank)
            out.append({"rank": v.rank, "status": status, "message": message,
                        "step_time": {"median": st.median, "p90": st.p90, "steps": st.steps} if st else None,
                        "breakdown": dict(v.breakdown), "samples_per_s": v.samples_per_s,
                        "collective_wait": sum(v.waits) / len(v.waits) if v.waits else None,
                        "allreduce_bytes_per_step": ar[0] if ar is not None else None,
                        "allreduce_rounds_per_step": ar[1] if ar is not None else None})
        return out

    def to_dict(self) -> dict[str, Any]:
        r, o = self.result, self.observations
        return {
            "schema": SCHEMA_VERSION,
            "target": r.spec.target,
            "args": list(r.spec.args),
            "status": r.status,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "message": self.headline,
            "traceback": r.traceback,
            "device": {"type": o.device, "name": o.device_name, "capability": o.capability},
            "framework": self.framework(),
            "precision": self.precision(),
            "steps": {"planned": r.spec.steps, "warmup": r.spec.warmup, "observed": len(r.observed),
                      "records": [{"index": s.index, "kind": s.kind, "wall": s.wall, "loss": s.loss,
                                   "phases": s.phases, "memory": s.memory, "samples": s.samples, "tokens": s.tokens}
                                  for s in r.steps]},
            "step_time": to_json(o.step_time) or {},
            "throughput": self.summary(),
            "breakdown": self.breakdown(),
            "memory": to_json(o.memory) or {},
            "syncs_per_step": self.syncs_per_step(),
            "syncs": to_json(o.syncs),
            "flops": to_json(o.flops) or {},
            "gpu": to_json(self.gpu) or {},
            "fidelity": {"profiled_step": self.fidelity.profiled, "observed_step": self.fidelity.observed,
                         "distortion": self.fidelity.distortion, "changed": list(self.fidelity.changed),
                         "note": self.fidelity.note()},
            "probes": to_json(o.probes),
            "findings": [f.to_dict() for f in self.findings],
            "skipped_checks": to_json(self.skipped),
            "check_errors": self.errors,
            "notes": o.notes,
            "trace": r.trace_path,
            "world_size": self.world_size,
            "ranks": self.ranks_json(),
            "stragglers": list(self.stragglers),
            "oom": to_json(r.oom) or {},
            "memory_fit": to_json(self.memory_fit) or {},
            "observations": o.to_dict(),
        }


def overhead_note(o: Overhead) -> str:
    """What the report says of the doctor's own cost (``Observations.overhead``). When its pairs
    disagree by more than 2x (a busy machine; CPU time follows wall time there too, as idle
    intra-op threads spin) it says the run cannot tell, and gives no figure."""
    how = (f"from {o.pairs} observed step(s) each followed by a step without them, in this process; the step "
           "times and shares are of the observed steps")
    if o.high > 2 * o.low:
        return (f"the doctor's own hooks on the step: too noisy to tell in this run (the pairs' wall ratios went "
                f"{100 * (o.low - 1):+.0f}% to {100 * (o.high - 1):+.0f}%), {how}")
    cpu = o.cpu_share
    cpu_text = f"{100 * cpu:+.1f}% CPU time, " if cpu is not None else ""
    return (f"the doctor's own hooks on the step: {cpu_text}{100 * o.share:+.1f}% wall time ({1e3 * o.observed:.2f} "
            f"ms against {1e3 * o.bare:.2f} ms; pairs {100 * (o.low - 1):+.1f}% to {100 * (o.high - 1):+.1f}%), {how}")


def _checks() -> list[type[Check]]:
    from pitstop import catalog

    return sorted((c for c in catalog.implementations("D") if issubclass(c, Check)), key=lambda c: (c.tip, c.__name__))


def diagnose(result: RunResult, thresholds: Thresholds | None = None, *, scope: str | None = None) -> Diagnosis:
    """Run the checks on ``result``; ``scope`` ("rank" or "job") runs only the checks of that
    :attr:`Check.scope` (a torchrun job runs the rank checks on each rank, the job checks
    once on the merged observations); None runs them all (the job checks only on merged
    observations)."""
    th = thresholds or Thresholds()
    obs = replace(result.observations) if result.observations is not None else Observations()
    if not obs.device_name:
        obs.device = result.device
    diag = Diagnosis(result=result, observations=obs, thresholds=th)
    diag.probe_notes = {name: note for name, p in obs.probes.items() if (note := gate_note(p, th.probe_speedup))}
    diag.memory_fit = assess(obs, result.oom, budget=result.spec.memory_budget)
    if not result.observed or result.observations is None:
        return diag
    if obs.gpu is None and result.trace_path and obs.on_cuda:
        obs.gpu, why = profiled_window(result.trace_path)
        if why:
            obs.notes = [*obs.notes, why]
    job = obs.distributed is not None and obs.distributed.merged
    diag.fidelity = fid = fidelity_of(obs)
    if obs.overhead is not None:
        obs.notes = [*obs.notes, overhead_note(obs.overhead)]
    from pitstop import catalog

    same_cost = {c.tip: c.same_cost_as for c in catalog.implementations("T") if c.same_cost_as}
    found: list[tuple[str, Finding]] = []
    quiet: dict[str, str] = {}
    for cls in _checks():
        if (scope is not None and cls.scope != scope) or (scope is None and cls.scope == "job" and not job):
            continue  # a plain run does not list the torchrun job's checks as skipped
        check = cls()
        reason = check.skip_reason(obs)
        if reason:
            diag.skipped.append(SkippedCheck(code=cls.tip, check=cls.__name__, reason=reason))
            continue
        try:
            role = check.role(obs)
            got = [(role, in_framework_terms(check, f, obs)) for f in check.check(obs, th)]
        except Exception as exc:  # a broken check must not hide the others' findings
            diag.errors.append(f"{cls.tip} {cls.__name__}: {type(exc).__name__}: {exc}")
            continue
        found += got
        if cls.same_cost_as:
            same_cost[cls.tip] = cls.same_cost_as
        if not got and quiet.get(cls.tip) != "live":
            quiet[cls.tip] = role
    diag.findings = [f for _, f in found]
    if obs.gpu is not None and obs.gpu.gpu is not None and scope != "job":
        diag.findings, dropped = merge(found, quiet, gpu_findings(obs.gpu, th), obs.gpu, th, fid)
        diag.skipped += [SkippedCheck(code=code, check="GPU evidence", reason=why) for code, why in dropped]
    diag.findings, folded = one_claim(diag.findings, same_cost)
    diag.skipped += [SkippedCheck(code=code, check="one cost, one finding", reason=why) for code, why in folded]
    if fid.changed:  # lowered confidence: the measured program is not the user's
        diag.findings = [lowered(f, "the doctor changed the program it measured") if f.impact_kind == "time" else f
                         for f in diag.findings]
    for name, p in sorted(obs.probes.items()):
        if p.error is not None:  # a crashed probe is as loud as a crashed check
            diag.errors.append(f"probe {name}: {p.error}")
    diag.findings = settle(diag.findings, th)  # the one rule: within the step, summaries below causes
    return diag
