"""The named records :class:`~pitstop.doctor.analysis.observations.Observations` is made of (torch-free).

Each record kind that crosses the child -> parent boundary is one dataclass here; their
JSON form (``Observations.to_dict``, the ``observations`` of ``pitstop doctor --format
json``) is written and read by :mod:`pitstop.jsoncodec` from the fields below, so a field's
name is its JSON key (``cls`` is written ``class``). ``None`` means "not measured".
The probes' results (:class:`ProbeResult`, ``Speedup``, ``Gain``) are in
:mod:`pitstop.doctor.analysis.probe_records`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pitstop.jsoncodec import FLATTEN, KEY, OMIT_NONE, OMIT_ZERO
from pitstop.stats import StepTime

__all__ = ["StepTime", "Breakdown", "Site", "SampledSite", "BatchRecord", "CpuRecord", "MemoryRecord",
           "OptimizerRecord", "OddSize", "LinearPair", "ForwardCounts", "Forwards", "ModelRecord", "LoaderRecord",
           "Kernels", "Flops", "Settings", "GraphRecord", "H2D", "FrameworkRecord",
           "Overhead", "PeriodicWork"]


@dataclass(frozen=True)
class Breakdown:
    """Mean seconds per observed step in each phase (:data:`~pitstop.doctor.analysis.observations.PHASES`)."""

    data: float = 0.0
    host: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0
    eval: float = 0.0
    other: float = 0.0

    def seconds(self, phase: str) -> float:
        return float(getattr(self, phase, 0.0))

    def shares(self) -> dict[str, float]:
        """Each phase's share of the step (empty when nothing was timed)."""
        parts = {f.name: max(0.0, float(getattr(self, f.name))) for f in dataclasses.fields(self)}
        total = sum(parts.values())
        return {k: v / total for k, v in parts.items()} if total > 0 else {}


@dataclass(frozen=True)
class Site:
    """A call site of a host-device sync or a CUDA call during observed steps. ``kind``:
    "item", "cpu", "numpy", "tolist", "float", "int", "bool", "cuda.synchronize",
    "cuda.empty_cache", "cuda.reset_max_memory_allocated", "sync-debug"."""

    where: str
    kind: str
    calls: int = 0
    steps_with_calls: int = 0
    seconds: float = 0.0
    #: the user's line that leads to ``where`` when ``where`` is a framework's (``trainer.train()``)
    via: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class SampledSite:
    """A source line the main thread ran in a phase (sampled stacks): ``share`` of the samples."""

    where: str
    share: float = 0.0
    samples: int = 0
    #: the user's line that leads to ``where`` when the user's line is a framework call
    #: (``trainer.train()``): ``where`` is then the deepest frame below it that explains the cost
    via: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class BatchRecord:
    """The training batch (``doctor/record/batch.py``): ``dim`` of the primary ``input`` is the batch,
    ``how`` it was inferred; ``tokens`` in one batch of sequences; per optimizer step:
    ``samples_per_step``, ``tokens_per_step``, ``micro_batches_per_step``."""

    size: int
    dim: int = 0
    input: str = ""
    how: str = ""
    tokens: int | None = None
    samples_per_step: float | None = None
    tokens_per_step: float | None = None
    micro_batches_per_step: float | None = None


@dataclass(frozen=True)
class CpuRecord:
    """What the cores did per observed step (see ``doctor/record/cores.py``)."""

    process_per_step: float | None = None
    data_wait_cpu_per_step: float | None = None
    workers_per_step: float | None = None
    workers: int = 0
    machine_cores: int | None = None
    load_avg: float | None = None
    steal_share: float | None = None
    #: the run's own demand for cores: torch's intra-op threads plus the cores its DataLoader
    #: workers kept busy (``workers_cores``: their CPU-seconds per second, not their number)
    own_threads: float | None = None
    workers_cores: float | None = None
    #: threads of the process that did work in the observed steps (ran >= 10% of the time)
    threads_busy: int | None = None
    #: seconds per step those threads were runnable but waiting for a core (summed over them)
    thread_wait_per_step: float | None = None
    #: the share of the step each of them waited for a core, on average (PIT108's impact)
    wait_share: float | None = None
    #: cores other processes kept busy during the observed steps (the machine's busy CPU time
    #: less this process's and its workers', per second)
    others_cores: float | None = None


@dataclass(frozen=True)
class MemoryRecord:
    """Bytes; ``peak_source`` says what ``peak`` is; ``samples``: memory in use per step."""

    params: int | None = None
    grads: int | None = None
    optimizer_state: int | None = None
    activations: int | None = None
    peak: int | None = None
    peak_source: str = ""
    capacity: int | None = None
    growth_per_step: float | None = None
    samples: list[int] = field(default_factory=list)
    phase_peaks: dict[str, int] = field(default_factory=dict)

    @property
    def accounted(self) -> int:
        """Parameters + gradients + optimizer state + activations, bytes (unmeasured: 0)."""
        return sum(x or 0 for x in (self.params, self.grads, self.optimizer_state, self.activations))

    @property
    def pressure(self) -> float | None:
        """Peak / capacity (None when either is unknown)."""
        return self.peak / self.capacity if self.peak and self.capacity else None


@dataclass(frozen=True)
class OptimizerRecord:
    """One optimizer that stepped: ``mode`` "for-loop" / "foreach" / "fused"; ``options``: its
    first param group's JSON-able options (``lr``, ``momentum``, ...)."""

    cls: str = field(default="", metadata=KEY("class"))
    mode: str = "for-loop"
    fused_available: bool = False
    params: int = 0
    param_bytes: int = 0
    state_bytes: int = 0
    state_ratio: float | None = None
    options: dict[str, Any] = field(default_factory=dict)
    frozen_params: int = 0
    frozen_numel: int = 0
    decay_1d_params: int = 0
    decay_1d_numel: int = 0
    weight_decay: float = 0.0


@dataclass(frozen=True)
class OddSize:
    """A layer (or the batch) whose ``sizes`` are not multiples of ``multiple``."""

    module: str
    type: str | None = field(default=None, metadata=OMIT_NONE)
    sizes: dict[str, int] = field(default_factory=dict, metadata=FLATTEN)
    multiple: int = 8


@dataclass(frozen=True)
class LinearPair:
    """Two Linear layers with nothing between them: ``saved_macs`` of ``macs`` per row when folded."""

    pair: tuple[str, str]
    saved_macs: int = 0
    macs: int = 0


@dataclass(frozen=True)
class ForwardCounts:
    """Top-level forwards by kind. ``train``: the graph reached a backward; ``eval_with_grad``:
    gradients enabled, the graph never reached one; ``nograd_train_mode`` / ``train_mode_eval``
    are sub-counts (evaluation while ``model.training`` was True). Zero counts are not written."""

    train: int = field(default=0, metadata=OMIT_ZERO)
    eval_no_grad: int = field(default=0, metadata=OMIT_ZERO)
    eval_inference_mode: int = field(default=0, metadata=OMIT_ZERO)
    eval_with_grad: int = field(default=0, metadata=OMIT_ZERO)
    nograd_train_mode: int = field(default=0, metadata=OMIT_ZERO)
    train_mode_eval: int = field(default=0, metadata=OMIT_ZERO)

    @property
    def total(self) -> int:
        """Every forward (each has one of the four main kinds)."""
        return self.train + self.eval_no_grad + self.eval_inference_mode + self.eval_with_grad


@dataclass(frozen=True)
class Forwards(ForwardCounts):
    """:class:`ForwardCounts` of every model, ``where`` each kind was first called, and
    ``autocast``: the autocast dtype of training forwards ("none", "bfloat16", ...) -> count."""

    where: dict[str, str] = field(default_factory=dict)
    autocast: dict[str, int] = field(default_factory=dict)

    @property
    def autocast_dtype(self) -> str | None:
        """The autocast dtype most training forwards ran under (None: most ran without, or no
        training forward was seen)."""
        if not self.autocast:
            return None
        top = max(self.autocast, key=self.autocast.__getitem__)
        return None if top == "none" or not self.autocast[top] else top


@dataclass(frozen=True)
class ModelRecord:
    """One top-level module whose forward ran (``cls``: the user's module, looked up through
    ``wrapped_by``, outermost first). ``conv_bias_bn``: biased Conv -> BatchNorm pairs,
    ``linear_linear``: adjacent Linear pairs, ``odd_sizes``: sizes not multiples of 8 (64)."""

    cls: str = field(default="", metadata=KEY("class"))
    wrapped_by: list[str] = field(default_factory=list)
    params: int = 0
    trainable: int = 0
    param_dtype: str = "float32"
    device: str = "cpu"
    dataparallel: bool = False
    ddp: bool = False
    compiled: bool = False
    mode_dependent: bool = False
    conv2d: int = 0
    forwards: ForwardCounts = field(default_factory=ForwardCounts)
    odd_sizes: list[OddSize] = field(default_factory=list)
    conv_bias_bn: list[tuple[str, str]] = field(default_factory=list)
    linear_linear: list[LinearPair] = field(default_factory=list)
    #: the module runs inside a ``torch.compile``'d function (``compiled`` is then True too): its
    #: calls are the function's, seen at the function's boundary; the module itself is eager
    compiled_function: bool = False


@dataclass(frozen=True)
class LoaderRecord:
    """One DataLoader iterated: ``role`` "train" (iterated with gradients enabled) or "eval"."""

    role: str = "eval"
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    batch_size: int | None = None
    sampler: str = ""
    distributed_sampler: bool = False
    where: str | None = None


@dataclass(frozen=True)
class Kernels:
    """From the profiled step: ``matmul`` / ``conv`` {dtype: count}, convolutions with
    channels-last / NCHW inputs, ``conv_input_shapes`` (shape -> observed steps)."""

    matmul: dict[str, int] = field(default_factory=dict)
    conv: dict[str, int] = field(default_factory=dict)
    conv_channels_last: int = 0
    conv_nchw: int = 0
    conv_input_shapes: dict[str, int] = field(default_factory=dict)

    @property
    def by_dtype(self) -> dict[str, int]:
        """Matmuls and convolutions per dtype."""
        out = dict(self.matmul)
        for k, v in self.conv.items():
            out[k] = out.get(k, 0) + v
        return out


@dataclass(frozen=True)
class Flops:
    per_step: int | None = None
    achieved_per_s: float | None = None
    peak_per_s: float | None = None
    mfu: float | None = None
    peak_source: str = "not measured"


@dataclass(frozen=True)
class Settings:
    """Backend flags; ``num_threads``: torch intra-op threads; ``cpu_cores``: CPUs this
    process may run on (its affinity mask)."""

    cudnn_benchmark: bool = False
    cudnn_deterministic: bool = False
    tf32_matmul: bool = False
    tf32_cudnn: bool = False
    float32_matmul_precision: str = "highest"
    deterministic_algorithms: bool = False
    num_threads: int | None = None
    cpu_cores: int | None = None
    world_size: int | None = None


@dataclass(frozen=True)
class GraphRecord:
    """Autograd ``nodes`` reachable from live tensors at ``steps``; ``live_losses`` of the
    ``losses_tracked`` earlier steps' losses still alive at the last observed step."""

    nodes: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    live_losses: int | None = field(default=None, metadata=OMIT_NONE)
    losses_tracked: int | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class H2D:
    """Host-to-device copies per observed step (CUDA) and the seconds they took."""

    blocking: float = 0.0
    non_blocking: float = 0.0
    seconds: float = 0.0

    @property
    def copies(self) -> float:
        return self.blocking + self.non_blocking


@dataclass(frozen=True)
class FrameworkRecord:
    """See :class:`pitstop.doctor.record.frameworks.FrameworkInfo` (its ``to_dict``)."""

    name: str | None = None
    label: str = "PyTorch"
    driver: str | None = None
    imported: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    configured: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Overhead:
    """The doctor's own cost on the step: the last ``pairs`` observed steps (its hooks on), each
    followed by a *bare* step (hooks off: only the step boundaries), in the same process.
    ``observed`` / ``bare``: median wall seconds of each side; ``low`` / ``high``: the smallest
    and largest wall ratio of one pair (observed over the bare step after it);
    ``observed_cpu`` / ``bare_cpu``: median process CPU seconds (steadier on a busy machine)."""

    pairs: int
    observed: float
    bare: float
    low: float
    high: float
    observed_cpu: float | None = None
    bare_cpu: float | None = None

    @property
    def share(self) -> float:
        """What the hooks add to the wall time, as a share of the step without them (0.05: +5%)."""
        return self.observed / self.bare - 1 if self.bare > 0 else 0.0

    @property
    def cpu_share(self) -> float | None:
        """The same in CPU time (None: not measured)."""
        if not self.observed_cpu or not self.bare_cpu:
            return None
        return self.observed_cpu / self.bare_cpu - 1


@dataclass(frozen=True)
class PeriodicWork:
    """Work a script does every N steps (``kind``: ``"eval"``, evaluation forwards and loader
    waits with the Python between them; ``"checkpoint"``, ``torch.save``), timed wherever it ran,
    warm-up included: ``where`` it ran (``via``: the user's line leading there), ``seconds`` (wall,
    median per occurrence), the record indices it ran in (``steps``; ``in_warmup`` / ``in_observed``
    of them), its ``period`` in optimizer steps and how it is known (``period_how``: the guard in
    the source, ``iter % eval_interval == 0`` with its value, or the spacing seen), and amortised
    over the period: ``per_step`` seconds and ``share`` of the training step's time (the observed
    steps' mean, their own evaluation excluded). ``None``: the period is unknown."""

    kind: str
    where: str | None = None
    seconds: float = 0.0
    occurrences: int = 0
    steps: list[int] = field(default_factory=list)
    in_warmup: int = 0
    in_observed: int = 0
    period: int | None = None
    period_how: str | None = None
    per_step: float | None = None
    share: float | None = None
    via: str | None = field(default=None, metadata=OMIT_NONE)
