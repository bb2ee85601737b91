"""One run of one tune configuration (:class:`Run`) and how it ended (torch-free).

Kept apart from :mod:`pitstop.tune.result` so that the options and the backends that make runs
do not depend on the result model that collects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

__all__ = ["Run", "RunStatus", "OK", "FAILED_STATUSES", "SetupSplit"]

#: How a run ended: ``ok``, or how it failed.
RunStatus = Literal["ok", "crashed", "timeout", "oom", "error", "setup_error", "too_few_steps"]
OK: RunStatus = "ok"
FAILED_STATUSES: tuple[RunStatus, ...] = tuple(s for s in get_args(RunStatus) if s != OK)


@dataclass(frozen=True)
class SetupSplit:
    """Where one script-mode run's time before its steady steps went, from marks the child took
    (:func:`pitstop.tune.child.mark_setup`): ``start`` (the request to the script's first line:
    the fork or process start, the bootstrap, the knobs' setups), ``imports`` (the script's own
    ``import`` statements), ``build`` (the rest of its set-up up to the first training forward:
    data, model), ``first_step`` (the first step's time beyond a steady step: lazy
    initialisation, cuBLAS/cuDNN handles and algorithm search, the knobs' model changes;
    compilation not included), ``compile`` (the compilations dynamo reported in the run). None:
    not marked (the script never ran a training forward, or the run was not a script run)."""

    start: float | None = None
    imports: float | None = None
    build: float | None = None
    first_step: float | None = None
    compile: float | None = None


@dataclass
class Run:
    """One run of one configuration. Per observed step: wall seconds (``step_times``) and,
    where the system has the clocks (:mod:`pitstop.doctor.record.clocks`), CPU seconds of the
    process and its workers (``cpu_times``), run-queue delay (``run_delays``), main-thread
    active seconds (``actives``) and CUDA event seconds (``gpu_times``)."""

    status: RunStatus
    step_times: list[float] = field(default_factory=list)    # observed steps, seconds
    warmup_times: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)  # every step, warmup first
    peak_memory: int | None = None                # bytes (CUDA max allocated / peak RSS / tracked)
    batch_size: int | None = None
    elapsed: float = 0.0                          # seconds, the whole run (startup included)
    round: int = -1                               # which pass it belongs to
    message: str = ""
    traceback: str | None = None
    cpu_times: list[float | None] = field(default_factory=list)
    run_delays: list[float | None] = field(default_factory=list)
    actives: list[float | None] = field(default_factory=list)
    gpu_times: list[float | None] = field(default_factory=list)
    setup_s: float | None = None                  # start of the run to its first step
    warmup_s: float | None = None                 # the warmup steps
    budget_cut: bool = False                      # its timeout was cut by the search's budget
    stderr_lines: list[str] = field(default_factory=list)  # what the script wrote to stderr
    compile: Any = None                           # CompileRecord: what dynamo reported (runs that compiled)
    rank_losses: list[list[float | None]] = field(default_factory=list)  # torchrun jobs: every rank's losses
    rank_step_times: list[float | None] = field(default_factory=list)    # torchrun jobs: each rank's median step
    rank_peaks: list[int | None] = field(default_factory=list)           # torchrun jobs: each rank's peak memory
    split: SetupSplit | None = None               # where its set-up went (script mode)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def median_step(self) -> float | None:
        from pitstop.stats import quantile

        return quantile(self.step_times, 0.5) if self.step_times else None

    def sample(self) -> Any:
        """The run's typical step as a :class:`pitstop.paired.Sample` (None without steps)."""
        from pitstop.paired import Sample

        if not self.step_times:
            return None
        n = len(self.step_times)

        def col(xs: list[float | None]) -> list[float | None]:
            return list(xs) if len(xs) == n else [None] * n

        steps = [_Step(w, c, d, a, g) for w, c, d, a, g in zip(self.step_times, col(self.cpu_times),
                                                                col(self.run_delays), col(self.actives),
                                                                col(self.gpu_times))]
        return Sample.of(steps)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "step_times": list(self.step_times), "warmup_times": list(self.warmup_times),
                "losses": list(self.losses), "peak_memory": self.peak_memory, "batch_size": self.batch_size,
                "elapsed": self.elapsed, "round": self.round, "message": self.message, "traceback": self.traceback,
                "cpu_times": list(self.cpu_times), "run_delays": list(self.run_delays), "actives": list(self.actives),
                "gpu_times": list(self.gpu_times), "rank_step_times": list(self.rank_step_times),
                "rank_peaks": list(self.rank_peaks)}


@dataclass(frozen=True)
class _Step:
    wall: float
    cpu: float | None
    run_delay: float | None
    main_active: float | None
    gpu: float | None
