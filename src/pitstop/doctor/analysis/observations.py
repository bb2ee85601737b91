"""The plain data the doctor gathers while a script trains (torch-free).

The instrumentation (``instrument.py`` and friends, in the child process) fills one
:class:`Observations`; the checks (face D, one per tip, in ``tips/pitNNN_*.py``) read it
and turn it into findings. Each record kind is a named dataclass (``doctor/analysis/records.py``);
``to_dict`` / ``from_dict`` (:mod:`pitstop.jsoncodec`) carry it across the process boundary
as JSON, so a check never needs torch. Read records by attribute, and ask the accessors
below (``model``, ``train_loader``, ``autocast_dtype``, ``usable_cores``, ``probe(key)``)
the questions the doctor's checks and tune share. Every field is documented here; ``None``
/ empty means "not measured" (light mode, or the script stopped before the measurement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pitstop.doctor.analysis.compile_records import CompileRecord
from pitstop.doctor.analysis.probe_records import ProbeResult
from pitstop.doctor.analysis.records import (H2D, BatchRecord, Breakdown, CpuRecord, Flops, Forwards,
                                    FrameworkRecord, GraphRecord, Kernels, LoaderRecord, MemoryRecord, ModelRecord,
                                    OptimizerRecord, Overhead, PeriodicWork, SampledSite, Settings, Site,
                                    StepTime)
from pitstop.doctor.analysis.dist_records import JobRecord
from pitstop.doctor.analysis.oom_records import MemoryProfile
from pitstop.jsoncodec import record_from_json, record_to_json
from pitstop.machine import CpuFeatures
from pitstop.trace.result import RankResult

__all__ = ["Observations", "PHASES"]

#: Phases of the step-time breakdown, in display order. ``data`` is the wait in a training
#: DataLoader; ``host`` the time between the step's start and its first training forward
#: that no other phase explains (batches prepared outside a DataLoader, e.g. nanoGPT's
#: ``get_batch`` slicing an ``np.memmap``; with manual parameter updates, the update too);
#: ``forward`` the forwards whose graph reached a backward; ``eval`` forwards and
#: DataLoader waits with gradients disabled *and* forwards with gradients enabled whose
#: graph never reached a backward (evaluation with autograd on), split off so that a
#: periodic validation does not read as "other".
PHASES = ("data", "host", "forward", "backward", "optimizer", "eval", "other")


@dataclass
class Observations:
    #: ``"cpu"`` or ``"cuda"``: where the trained model's parameters live.
    device: str = "cpu"
    #: GPU name (``pitstop.gpu.cuda_device``) or the CPU's ISA level.
    device_name: str = ""
    #: CUDA compute capability ``[major, minor]``, None on CPU.
    capability: list[int] | None = None
    #: device memory (CUDA total memory, or the machine's RAM on CPU), bytes.
    capacity: int | None = None
    #: batch size of the first training forward (see ``batch``).
    batch_size: int | None = None
    #: the training batch (``doctor/record/batch.py``): ``size``, ``dim`` (which dimension of the
    #: primary input is the batch), ``input`` (which input: "argument 0", "input_ids", ...),
    #: ``how`` (how the dimension was inferred, in words), ``tokens`` (tokens in one batch
    #: when the input is a sequence batch, else None), ``samples_per_step`` /
    #: ``tokens_per_step`` (all training forwards of an optimizer step: gradient accumulation
    #: counts every micro-batch), ``micro_batches_per_step``.
    batch: BatchRecord | None = None
    #: what ends a step: ``"optimizer.step"`` (the first torch optimizer that stepped), or
    #: ``"backward"`` when no optimizer stepped but the parameters changed between backward
    #: calls (manual updates); None when neither was seen.
    step_boundary: str | None = None
    #: source lines the main thread ran during ``host`` time (sampled stacks, innermost
    #: user frame, sampled every 5 ms): records with ``where`` ("file:line"), ``share`` of the
    #: samples and ``samples`` (their number).
    host_sites: list[SampledSite] = field(default_factory=list)
    #: the same for the rest of the step's unmeasured time (``other``: Python between the
    #: phases, e.g. a ``get_batch`` between forward and backward, logging, the loss's
    #: ``.item()``).
    other_sites: list[SampledSite] = field(default_factory=list)
    #: work done every N steps (evaluation, ``torch.save`` checkpoints), timed wherever it ran,
    #: warm-up included, and amortised over its period (``doctor/record/periodic.py``): records
    #: with ``kind``, ``where``, ``via``, ``seconds`` (per occurrence), ``occurrences``, ``steps``,
    #: ``in_warmup``, ``in_observed``, ``period`` (steps; None: unknown), ``period_how``,
    #: ``per_step`` and ``share`` (of the training step's time).
    periodic: list[PeriodicWork] = field(default_factory=list)
    #: what the cores did, per observed step: ``process_per_step`` (CPU seconds of the
    #: training process, all threads), ``data_wait_cpu_per_step`` (of which during
    #: training DataLoader waits), ``workers_per_step`` (CPU seconds of DataLoader worker
    #: processes, Linux /proc; None when not measured), ``workers`` (training loader's
    #: num_workers), ``machine_cores``, ``load_avg`` (1-minute, at the end),
    #: ``steal_share`` (hypervisor steal over the run, Linux), ``own_threads``.
    cpu: CpuRecord | None = None
    #: the CPU's model, flags and oneDNN cap as the run read them (``pitstop.machine.CpuFeatures``:
    #: ``/proc/cpuinfo``, or the file given with ``--cpuinfo``: ``source`` says which).
    processor: CpuFeatures | None = None
    steps_observed: int = 0
    #: seconds: median, p90, mean, min, max of the observed steps' wall times.
    step_time: StepTime | None = None
    #: mean seconds per observed step for each of :data:`PHASES`.
    breakdown: Breakdown | None = None
    #: call sites of host-device syncs during observed steps: records with ``where``
    #: ("file:line"), ``kind`` ("item", "cpu", "numpy", "tolist", "float", "int", "bool",
    #: "cuda.synchronize", "sync-debug"), ``calls``, ``steps_with_calls``, ``seconds``.
    syncs: list[Site] = field(default_factory=list)
    #: call sites of ``torch.cuda.synchronize`` / ``empty_cache`` /
    #: ``reset_max_memory_allocated`` during observed steps (same keys as ``syncs``).
    cuda_calls: list[Site] = field(default_factory=list)
    #: bytes: ``params``, ``grads``, ``optimizer_state``, ``activations`` (saved for
    #: backward in one training step, parameters excluded), ``peak`` (``peak_source``:
    #: "cuda max_memory_allocated" or "process peak RSS"), ``capacity``,
    #: ``growth_per_step`` (slope of per-step memory in use), ``samples`` (per step).
    memory: MemoryRecord | None = None
    #: one step followed storage by storage (``doctor/record/oom/watch.py``): its peak and what the
    #: peak was made of, activations saved by module and by repeated block, the optimizer
    #: step's peak, the 16-bit autocast ratio of saved bytes (``doctor/analysis/oom_records.py``)
    memory_profile: MemoryProfile | None = None
    #: one record per optimizer that stepped: ``cls`` (JSON ``class``), ``mode`` ("for-loop", "foreach",
    #: "fused"), ``fused_available``, ``params``, ``param_bytes``, ``state_bytes``,
    #: ``state_ratio`` (measured state / param bytes), ``options`` (the first param group's
    #: JSON-able options: ``lr``, ``momentum``, ``amsgrad``, ...), ``frozen_params``,
    #: ``frozen_numel``, ``decay_1d_params``, ``decay_1d_numel``, ``weight_decay`` (max over
    #: groups holding 1-D params).
    optimizers: list[OptimizerRecord] = field(default_factory=list)
    #: one record per top-level module whose forward ran: ``cls`` (JSON ``class``; the user's module, looked
    #: up through wrappers), ``wrapped_by`` (the wrappers' class names, outermost first:
    #: ``["_FabricModule"]`` under Fabric, ``["DataParallel", "OptimizedModule"]``, see
    #: ``doctor/record/frameworks.py`` ``wrapper_chain``), ``params``,
    #: ``trainable``, ``param_dtype``, ``dataparallel``, ``ddp``, ``compiled``,
    #: ``mode_dependent`` (has dropout/batch norm), ``conv2d``, ``conv_bias_bn`` (pairs of
    #: module names, found from the data flow of one training forward), ``linear_linear``
    #: (pairs with ``saved_macs`` per sample), ``odd_sizes`` (layers whose sizes are not
    #: multiples of 8, or 64 for embeddings/vocabularies).
    models: list[ModelRecord] = field(default_factory=list)
    #: one record per DataLoader iterated: ``role`` ("train" when iterated with gradients
    #: enabled, else "eval"), ``num_workers``, ``pin_memory``, ``persistent_workers``,
    #: ``prefetch_factor``, ``batch_size``, ``sampler``, ``distributed_sampler``.
    loaders: list[LoaderRecord] = field(default_factory=list)
    #: counts of top-level forwards by kind: ``train`` (graph reached a backward),
    #: ``eval_no_grad``, ``eval_inference_mode``, ``eval_with_grad`` (gradients enabled but
    #: the graph never reached a backward, whatever model.training says),
    #: ``nograd_train_mode`` (grad disabled but model.training True), ``train_mode_eval``
    #: (every evaluation forward, with or without grad, while model.training was True);
    #: ``where`` maps a kind to its first call site; ``autocast`` maps the autocast dtype of training forwards
    #: ("none", "bfloat16", "float16") to a count.
    forwards: Forwards = field(default_factory=Forwards)
    backward_calls: int = 0
    #: calls of ``GradScaler.scale`` (fp16 without a scaler: PIT306).
    scaler_calls: int = 0
    #: from the profiled step: ``matmul`` / ``conv`` {dtype: count}, ``conv_channels_last``,
    #: ``conv_nchw``, ``conv_input_shapes`` (distinct shapes seen in observed steps).
    kernels: Kernels = field(default_factory=Kernels)
    #: ``per_step`` FLOPs (FlopCounterMode, one step), ``achieved_per_s``, ``peak_per_s``
    #: and ``mfu`` (known GPUs only, else None) with ``peak_source``.
    flops: Flops | None = None
    #: backend flags: ``cudnn_benchmark``, ``cudnn_deterministic``, ``tf32_matmul``,
    #: ``tf32_cudnn``, ``float32_matmul_precision``, ``deterministic_algorithms``,
    #: ``num_threads`` (torch intra-op threads), ``cpu_cores`` (CPUs this process may run
    #: on), ``world_size``.
    settings: Settings = field(default_factory=Settings)
    #: retained autograd graphs: ``nodes`` (autograd nodes reachable from live tensors,
    #: after ``gc.collect()``, at the end of the first, middle and last observed step) and
    #: ``steps`` (their step indices), ``live_losses`` (loss tensors of earlier steps still
    #: alive at the last observed step), ``losses_tracked``.
    graph: GraphRecord | None = None
    #: host-to-device copies per observed step on CUDA: ``blocking``, ``non_blocking``.
    h2d: H2D | None = None
    #: what torch.compile did (:mod:`pitstop.doctor.analysis.compile_records`): breaks, recompiles, compile time.
    compile: CompileRecord | None = None
    #: quick hardware probes (registered :class:`~pitstop.doctor.analysis.probe.Probe` faces), by
    #: key ("precision", "channels_last", "optimizer", ...): the standard result of
    #: :meth:`pitstop.doctor.record.probing.run.ProbeContext.compare` (``what``, ``baseline``,
    #: ``seconds`` median per variant, ``runs``, ``speedups``, ``candidate``, ``speedup``,
    #: ``interval`` [low, high], ``confidence``, ``compute_only``), or ``skipped`` with the
    #: reason, or ``error`` (a probe that crashed; listed in the report's check errors).
    probes: dict[str, ProbeResult] = field(default_factory=dict)
    #: the training framework driving the script, detected from the call stack at the first
    #: optimizer step (:class:`pitstop.doctor.record.frameworks.FrameworkInfo`): ``name``
    #: ("lightning", "fabric", "transformers", "accelerate", or None for a plain loop),
    #: ``label``, ``driver`` (the class whose method stepped the optimizer), ``imported``,
    #: ``versions``, ``configured`` (its precision / workers / optimizer options as set).
    framework: FrameworkRecord | None = None
    #: measurements that could not be made, with the reason (e.g. FLOPs of a compiled model).
    notes: list[str] = field(default_factory=list)
    #: a torchrun job (``pitstop doctor --nproc-per-node N``; None otherwise): the ranks'
    #: distributed measurements (``doctor/analysis/dist_records.py`` :class:`JobRecord`): one rank in
    #: a rank's own observations, every rank once the parent merged them.
    distributed: JobRecord | None = None
    #: the GPU evidence (CUDA runs): the doctor's profiled steps, analysed by the one trace
    #: analysis of :mod:`pitstop.trace` (``doctor/analysis/evidence.py`` ``profiled_window``): GPU busy and
    #: idle by cause, syncs, copies, kernel precision by kernel name, launches, top kernels.
    #: The GPU facts of every finding come from it; None on CPU or when nothing was profiled.
    gpu: RankResult | None = None
    #: the doctor's own cost on the observed step (full mode: its last observed steps against
    #: the bare steps alternating with them, same process); None when not measured.
    overhead: Overhead | None = None

    # -- derived: one accessor per question the doctor's checks and tune both ask ------------
    @property
    def on_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def mean_step(self) -> float:
        """Mean seconds per observed step (0 when no step was observed)."""
        return self.step_time.mean if self.step_time else 0.0

    def seconds(self, phase: str) -> float:
        """Mean seconds per step spent in ``phase`` (0 when unmeasured)."""
        return self.breakdown.seconds(phase) if self.breakdown else 0.0

    def share(self, phase: str) -> float:
        """Mean share of the step spent in ``phase`` (0 when unmeasured)."""
        total = self.mean_step
        return (self.seconds(phase) / total) if total > 0 else 0.0

    @property
    def compute_share(self) -> float:
        """Share of the step in forward + backward (what precision/layout tricks speed up)."""
        return self.share("forward") + self.share("backward")

    @property
    def framework_name(self) -> str | None:
        """The detected framework's name (None: a plain PyTorch loop)."""
        return self.framework.name if self.framework else None

    @property
    def model(self) -> ModelRecord | None:
        """The trained model: the largest top-level module whose forward ran."""
        return self.models[0] if self.models else None

    @property
    def optimizer(self) -> OptimizerRecord | None:
        """The first optimizer that stepped."""
        return self.optimizers[0] if self.optimizers else None

    def train_loaders(self) -> list[LoaderRecord]:
        """The DataLoaders iterated with gradients enabled."""
        return [d for d in self.loaders if d.role == "train"]

    @property
    def train_loader(self) -> LoaderRecord | None:
        """The (first) training DataLoader."""
        loaders = self.train_loaders()
        return loaders[0] if loaders else None

    @property
    def autocast_dtype(self) -> str | None:
        """The autocast dtype most training forwards ran under; None when most ran without
        autocast (or none was seen). "Already under autocast" for the doctor and tune alike."""
        return self.forwards.autocast_dtype

    @property
    def compiled(self) -> bool:
        """Any trained model is ``torch.compile``'d."""
        return bool(self.compile and self.compile.compiled) or any(m.compiled for m in self.models)

    @property
    def usable_cores(self) -> int | None:
        """CPUs the training process may run on (its affinity mask, measured in the child)."""
        return self.settings.cpu_cores

    def probe(self, key: str) -> ProbeResult | None:
        """The result a probe stored under ``key`` (None: it did not run)."""
        return self.probes.get(key)

    # -- JSON (crosses the child -> parent boundary; the ``observations`` of --format json) -
    def to_dict(self) -> dict[str, Any]:
        return record_to_json(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Observations:
        return record_from_json(cls, d)
