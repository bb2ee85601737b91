"""The typed result of ``pitstop trace`` (torch-free): one :class:`RankResult` per trace file,
the job's :class:`TraceReport`, and their JSON (``docs/trace-schema.json``).

Shares are fractions (0.25 = 25%) of the analysed window: the union of the host
``ProfilerStep#N`` intervals, or, for a trace without steps, the span from the first to the
last GPU activity (``window.basis`` says which). Seconds are wall seconds on the trace clock.
``None`` means the trace cannot tell (no GPU events, no steps, no host events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pitstop.jsoncodec import record_from_json, record_to_json, to_json
from pitstop.findings import Finding
from pitstop.ranks import StraggleAnalysis
from pitstop.stats import StepTime
from pitstop.trace.jobtypes import JobSummary

__all__ = ["StepTime", "Window", "GpuTime", "IdleSplit", "SpanBreakdown", "KernelMix", "NamedTime", "Precision",
           "Launches", "CompiledWork", "SyncSite", "Syncs", "Copies", "DataLoading", "OptimizerKernels", "RankResult",
           "TraceReport", "SCHEMA_VERSION", "CollectiveTime", "UnitTime", "Collectives"]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Window:
    """What the shares are shares of: ``basis`` ``"steps"`` or ``"gpu span"``, its seconds."""

    basis: str
    seconds: float
    start_us: float
    end_us: float


@dataclass(frozen=True)
class GpuTime:
    """GPU activity (kernels, memcpys, memsets; all streams merged) inside the window.

    ``busy`` + ``idle`` = 1. ``busy_launched`` is busy over the span of the GPU work that
    the steps launched (by correlation), the way TraceLens and HTA measure.
    """

    busy: float
    idle: float
    busy_seconds: float
    busy_launched: float | None
    streams: int
    devices: int


@dataclass(frozen=True)
class IdleSplit:
    """GPU idle time in the window by what the host did meanwhile (shares of the window).

    ``input``: inside a DataLoader ``__next__``; ``sync``: from the moment the host blocked in
    a sync call until it launched the next work; ``launch``: while the host was on its way to
    the next GPU work (inside launch runtime calls or a PyTorch operator that launched GPU work,
    or a gap shorter than the launch threshold between back-to-back kernels); ``host``: the rest
    (Python between operators, operators that launch nothing, or no host event at all).
    """

    input: float
    host: float
    launch: float
    sync: float


@dataclass(frozen=True)
class SpanBreakdown:
    """HolisticTraceAnalysis' temporal breakdown, computed its way: over the span from the
    first to the last GPU activity, dropping the work launched in the last step when there
    are two or more, timestamps rounded to whole microseconds. Shares of ``span_us``."""

    idle: float
    compute: float
    non_compute: float
    span_us: float


@dataclass(frozen=True)
class NamedTime:
    """A kernel or operator: calls and GPU seconds inside the window, share of kernel time."""

    name: str
    calls: int
    seconds: float
    share: float


@dataclass(frozen=True)
class KernelMix:
    """Kernel time split (event durations clipped to the window, streams added up).

    ``communication_share`` and ``compute_share`` are shares of kernel time;
    ``memory_share`` is memcpy+memset time over all GPU time; ``communication_overlap``
    the share of communication time during which a compute kernel also ran (None: no
    communication). ``communication_per_step`` holds the seconds per step spent in
    communication kernels, in step order (what the straggler rule compares across ranks).
    """

    kernel_seconds: float
    compute_share: float
    communication_share: float
    memory_share: float
    communication_overlap: float | None
    communication_exposed: float
    communication_per_step: tuple[float, ...]
    top: tuple[NamedTime, ...]


@dataclass(frozen=True)
class Precision:
    """GEMM/convolution kernel time by the precision its name states (shares of that time)."""

    matmul_share: float
    by_precision: dict[str, float]
    fp32_share: float
    tensor_cores: bool | None
    tf32_capable: bool

    def fp32_math(self, busy: float) -> float:
        """Share of the step that fp32 GEMM/conv kernels take, given the GPU's busy share:
        kernel time is counted as busy time, split by the shares above."""
        return busy * self.matmul_share * self.fp32_share


@dataclass(frozen=True)
class Launches:
    """Kernel launches: how many, how short, the idle they leave (``IdleSplit.launch``) and
    the share of kernels that are elementwise (pointwise) ones."""

    kernels_per_step: float
    median_kernel_us: float
    short_kernels: float
    short_threshold_us: float
    idle_share: float
    elementwise: float


@dataclass(frozen=True)
class CompiledWork:
    """What ran compiled in the window (``trace/compiled.py``), per step: ``regions`` (dynamo's
    ``Torch-Compiled Region`` annotations: entries into compiled code), ``graphs`` (AOTAutograd's
    ``CompiledFunction``: compiled graph runs with gradients), ``graph_launches`` (CUDA graph
    replays: ``cudaGraphLaunch``); of the kernels, the share ``graphed`` (replayed by a graph
    launch) and ``triton`` (Inductor's ``triton_…``); ``eager_kernels_per_step``: kernels that
    are none of these and were not launched while compiled code ran; ``eager_elementwise``: the
    share of all kernels that are such eager elementwise kernels (what fusing could still merge)."""

    regions_per_step: float
    graphs_per_step: float
    graph_launches_per_step: float
    graphed_share: float
    triton_share: float
    eager_kernels_per_step: float
    eager_elementwise: float

    @property
    def any(self) -> bool:
        """Anything compiled or graph-replayed ran in the window."""
        return bool(self.regions_per_step or self.graphs_per_step or self.graph_launches_per_step
                    or self.triton_share)


@dataclass(frozen=True)
class SyncSite:
    """A host-device sync call and what made it (innermost operator / Python frame)."""

    call: str
    cause: str
    count: int
    seconds: float


@dataclass(frozen=True)
class Syncs:
    per_step: float
    count: int
    seconds_share: float
    sites: tuple[SyncSite, ...]


@dataclass(frozen=True)
class Copies:
    """Memcpy and memset activity in the window."""

    pageable: int
    pinned: int
    unknown: int
    htod: int
    dtoh: int
    copy_share: float
    pageable_share: float
    copy_overlap: float | None
    memsets_per_step: float
    memset_share: float


@dataclass(frozen=True)
class DataLoading:
    """``share``: step time the host spent in DataLoader ``__next__`` while the GPU had
    nothing to do (the time a faster pipeline saves); ``host_share``: all its host time."""

    share: float | None
    host_share: float | None
    seconds_per_step: float | None


@dataclass(frozen=True)
class OptimizerKernels:
    """Kernels launched from inside ``optimizer.step()`` annotations, per step."""

    kernels_per_step: float
    share: float
    multi_tensor: bool


@dataclass(frozen=True)
class CollectiveTime:
    """One kind of collective (``all_gather``, ``reduce_scatter``, ``all_reduce``, ``other``) in
    the window, per step: calls, seconds it ran (kernels; on CPU the blocked host time), the
    part of them no compute ran beside (exposed), and that part's share of the window."""

    kind: str
    calls_per_step: float
    seconds_per_step: float
    exposed_per_step: float
    exposed_share: float


@dataclass(frozen=True)
class UnitTime:
    """An FSDP2 unit (``""``: the root): exposed seconds per step of its all-gathers and
    reduce-scatters (the collectives its annotations launched)."""

    unit: str
    all_gather_s: float
    reduce_scatter_s: float


@dataclass(frozen=True)
class Collectives:
    """The collectives of one trace (:mod:`pitstop.trace.collectives`). ``source``: ``"gpu
    kernels"`` or ``"host (blocking collectives)"`` (CPU, gloo); ``sharding``: ``"fsdp2"``,
    ``"fsdp1"`` or ``""`` (no FSDP mark); ``fsdp_exposed_per_step``: exposed all-gather plus
    reduce-scatter seconds in each step; ``root_only``: FSDP2 gathered through the root unit
    only (no per-block units)."""

    source: str
    sharding: str
    kinds: tuple[CollectiveTime, ...]
    units: tuple[UnitTime, ...]
    fsdp_exposed_per_step: tuple[float, ...]
    fsdp_exposed_share: float
    root_only: bool

    def kind(self, name: str) -> CollectiveTime | None:
        return next((k for k in self.kinds if k.kind == name), None)


@dataclass(frozen=True)
class RankResult:
    """What one trace file (one rank) says. ``notes`` are plain statements of what the trace
    cannot show (host-only, no steps ...)."""

    source: str
    rank: int
    world_size: int
    device: str
    vendor: str
    schema: str
    steps: int
    step_numbers: tuple[int, ...]
    step_time: StepTime | None
    window: Window | None
    gpu: GpuTime | None
    idle: IdleSplit | None
    span: SpanBreakdown | None
    kernels: KernelMix | None
    precision: Precision | None
    launches: Launches | None
    syncs: Syncs
    copies: Copies | None
    dataloader: DataLoading
    optimizer: OptimizerKernels | None
    top_operators: tuple[NamedTime, ...]
    host_only: bool
    notes: tuple[str, ...] = ()
    #: the collectives by kind and FSDP's per unit (None: the trace holds none)
    collectives: Collectives | None = None
    #: what ran compiled or graph-replayed (None: no window to analyse)
    compiled: CompiledWork | None = None

    def to_dict(self) -> dict:
        return record_to_json(self)




@dataclass(frozen=True)
class TraceReport:
    """``pitstop trace``'s answer for one file or one job's folder of per-rank files.
    ``straggle``: the straggler model's whole answer (culprits, victims, one-offs, late
    steps; None when the files are not one job's ranks); ``job``: the job view (several ranks)."""

    ranks: tuple[RankResult, ...]
    #: the one runtime finding type (:class:`pitstop.findings.Finding`): ``impact`` (its
    #: ``impact_share``) is the share of the step a fix could save (None: the trace cannot size
    #: it), ``rank`` None for a job-wide finding
    findings: tuple[Finding, ...]
    stragglers: tuple[int, ...]
    step_spread: float | None = None
    notes: tuple[str, ...] = field(default=())
    straggle: StraggleAnalysis | None = None
    job: JobSummary | None = None

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "ranks": [to_json(r) for r in self.ranks],
                "findings": [f.trace_dict() for f in self.findings], "stragglers": list(self.stragglers),
                "step_spread": self.step_spread, "notes": list(self.notes),
                "straggle": to_json(self.straggle) if self.straggle is not None else None,
                "job": to_json(self.job) if self.job is not None else None}

    @classmethod
    def from_dict(cls, data: dict) -> TraceReport:
        """A report read back from its JSON (``pitstop trace --format json``), equal to the original."""
        return record_from_json(cls, data)
