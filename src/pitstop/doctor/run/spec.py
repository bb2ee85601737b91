"""What to run and what came back: the runner's JSON-able records (torch-free).

:class:`RunSpec` says which script to run and how (steps, warmup, timeout, setups, seed,
mode); :class:`RunResult` is what the child process wrote back: a status, the per-step
records (wall time, phases, loss) and, in ``full`` mode, the :class:`Observations` the
doctor's checks read. Both round-trip through JSON (``to_dict`` / ``from_dict``, the one
codec :mod:`pitstop.jsoncodec`), which is how they cross the process boundary and how
``pitstop tune`` can store them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pitstop.doctor.analysis.compile_records import CompileRecord
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.oom_records import OomRecord
from pitstop.jsoncodec import dumps, record_from_json, record_to_json

__all__ = ["Setup", "SetupFailed", "RunSpec", "StepRecord", "RunResult", "STATUSES", "MODES", "MAX_TIMEOUT"]

#: How a run ended. ``stopped``: the doctor stopped the script after the planned steps
#: (the normal case); ``finished``: the script returned by itself; ``exited``: it called
#: ``sys.exit``; ``error``: it raised; ``timeout``: the watchdog stopped it;
#: ``setup_error``: a setup callable failed, before the script or (:class:`SetupFailed`) when
#: its change took effect while the script ran; ``crashed``: the child died without a report;
#: ``interrupted``: Ctrl-C / SIGTERM stopped the run (a torchrun job's partial report).
STATUSES = ("stopped", "finished", "exited", "error", "timeout", "setup_error", "crashed", "interrupted")

#: ``full``: every measurement the checks need. ``light``: step wall times and losses only
#: (for A/B trials, where heavy instrumentation would slow the thing being measured).
MODES = ("full", "light")

#: the longest timeout a run accepts, in seconds (30 days); ``None`` means no timeout
MAX_TIMEOUT = 30 * 24 * 3600.0


class SetupFailed(RuntimeError):
    """Raised (in the child) when a setup's change fails as it takes effect while the script
    runs, e.g. a ``pitstop tune`` knob patching the model at its first forward: the run ends
    with status ``setup_error`` and this message, not ``error`` (the script is not at fault)."""


@dataclass(frozen=True)
class Setup:
    """An importable callable run in the child after instrumentation, before the script.

    ``target`` is ``"package.module:function"``; ``kwargs`` must be JSON-able. This is how
    ``pitstop tune`` applies one intervention (patch DataLoader defaults, wrap the model's
    forward in autocast, ...) to an unmodified script.
    """

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        mod, sep, fn = self.target.partition(":")
        if not sep or not mod or not fn:
            raise ValueError(f"setup target {self.target!r} must look like 'package.module:function'")
        json.dumps(self.kwargs)  # raises TypeError early when not JSON-able

    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Setup:
        return record_from_json(cls, d)


@dataclass(frozen=True)
class RunSpec:
    """One run of a training script under the doctor's bootstrap.

    Exactly one of ``script`` (a path) or ``module`` (``-m`` name) is set. The child runs
    ``warmup`` optimizer steps, then ``steps`` observed ones (then, in full mode, one
    profiled step for FLOPs and kernel precision, and ``trace_steps`` under
    ``torch.profiler`` when ``trace_dir`` is set), then stops the script.
    ``stop=False`` lets the script run to its own end (observing the first ``steps``).
    """

    script: str | None = None
    module: str | None = None
    args: tuple[str, ...] = ()
    steps: int = 10
    warmup: int = 2
    timeout: float | None = 600.0
    setups: tuple[Setup, ...] = ()
    seed: int | None = 0
    mode: str = "full"
    probes: bool = True
    trace_dir: str | None = None
    trace_steps: int = 3
    stop: bool = True
    cwd: str | None = None
    python: str = sys.executable
    #: where the script's stdout goes: ``"inherit"`` (visible), ``"stderr"`` (keep stdout
    #: clean for JSON), ``"devnull"``, or a file path. stderr is always inherited.
    stdout: str = "inherit"
    #: a torchrun job: ranks on this node (``--nproc-per-node``); None runs one process.
    #: ``nnodes``, ``node_rank`` and ``rdzv_endpoint`` are passed to ``torch.distributed.run``
    #: as they are (None: a single node, rendezvous on the loopback address).
    nproc_per_node: int | None = None
    nnodes: str = "1"
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    #: a file in ``/proc/cpuinfo``'s format that describes the CPU instead of the OS's own
    #: (``--cpuinfo``): what the doctor would say on another CPU (tests inject CPUs this way;
    #: the speed measured is still this machine's, and the report says the CPU was described).
    cpuinfo: str | None = None
    #: bytes the training must fit in (``--memory-budget``): the report says what fits in it
    #: (``doctor/analysis/fits.py``); None: the device's capacity
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        if (self.script is None) == (self.module is None):
            raise ValueError("give exactly one of script= or module=")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.timeout is not None and not 0 < self.timeout <= MAX_TIMEOUT:  # also refuses nan
            raise ValueError(f"timeout must be > 0 and <= {MAX_TIMEOUT:g} seconds (or None), got {self.timeout}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.trace_steps < 1:
            raise ValueError(f"trace_steps must be >= 1, got {self.trace_steps}")
        if self.nproc_per_node is not None and self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be >= 1, got {self.nproc_per_node}")
        if self.memory_budget is not None and self.memory_budget < 1:
            raise ValueError(f"memory_budget must be a number of bytes >= 1, got {self.memory_budget}")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "setups", tuple(s if isinstance(s, Setup) else Setup.from_dict(s) for s in self.setups))

    @property
    def target(self) -> str:
        return self.script if self.script is not None else f"-m {self.module}"

    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return record_from_json(cls, d)


@dataclass
class StepRecord:
    """One optimizer step of the primary optimizer (the first one that stepped).

    ``kind`` is ``warmup``, ``observed``, ``profiled`` or ``traced``; only observed steps
    enter the statistics. ``cpu`` is the process's CPU time over the step (all threads), a
    measure that other processes on a busy machine disturb less than ``wall``. ``phases`` holds seconds per phase (``data``, ``forward``,
    ``backward``, ``optimizer``, ``eval``, ``host``, ``sync``); ``other`` is ``wall`` minus their sum
    (``sync`` excluded: sync time is spent inside other phases). ``loss`` is the sum of the
    tensors ``.backward()`` was called on during the step (unscaled when a GradScaler
    scaled them), read once at the end of the run: no per-step host sync.
    """

    index: int
    kind: str
    wall: float
    cpu: float | None = None  # process CPU seconds (all threads): less sensitive to other load
    cpu_children: float | None = None  # CPU seconds of child processes (DataLoader workers)
    run_delay: float | None = None     # seconds its threads waited for a core (contention)
    main_active: float | None = None   # seconds the main thread ran or was runnable (the rest it slept)
    gpu: float | None = None           # CUDA: seconds between the events at the step's boundaries
    phases: dict[str, float] = field(default_factory=dict)
    loss: float | None = None
    backward_calls: int = 0
    batch_size: int | None = None
    memory: int | None = None  # bytes in use at the end of the step (CUDA allocated / RSS)
    samples: int | None = None  # samples of all training forwards (micro-batches) of the step
    tokens: int | None = None   # tokens of those forwards when the inputs are sequences
    micro_batches: int | None = None  # training forwards (those whose graph reached a backward)

    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        return record_from_json(cls, d)


@dataclass
class RunResult:
    """What one run produced (JSON-able; see :mod:`pitstop.doctor` for the API)."""

    spec: RunSpec
    status: str
    steps: list[StepRecord] = field(default_factory=list)
    exit_code: int | None = None      # the script's sys.exit code (status "exited")
    traceback: str | None = None      # status "error" / "setup_error"
    message: str = ""                 # one line for humans
    elapsed: float = 0.0              # seconds, child start to report
    peak_memory: int | None = None    # bytes: CUDA max allocated, else peak RSS
    device: str = "cpu"
    observations: Observations | None = None  # full mode only (see observations.py)
    trace_path: str | None = None
    returncode: int | None = None     # the child process's exit status
    compile: CompileRecord | None = None  # what dynamo reported, when the script compiled (both modes)
    oom: OomRecord | None = None      # the script ran out of memory (raised, or killed while its memory grew)

    @property
    def observed(self) -> list[StepRecord]:
        return [s for s in self.steps if s.kind == "observed"]

    @property
    def steps_per_s(self) -> float | None:
        obs = self.observed
        total = sum(s.wall for s in obs)
        return len(obs) / total if obs and total > 0 else None

    @property
    def losses(self) -> list[float | None]:
        return [s.loss for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return record_from_json(cls, d)

    def write(self, path: str | Path) -> None:
        """Atomic write: a reader never sees half a file."""
        from pitstop.atomic import write_atomic

        write_atomic(path, dumps(self.to_dict(), indent=None))

    @classmethod
    def read(cls, path: str | Path) -> RunResult:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
