"""The in-process instrumentation: small recorders wired together.

Installed before the user's script runs (by the child bootstrap) or around a step function
(:func:`pitstop.doctor`). Nothing depends on names in the user's code. Each recorder owns
its state and installs its own hooks; :class:`Instrumentation` builds them, installs and
uninstalls them, and routes the end of a step to each:

- :class:`~pitstop.doctor.record.steps.StepLog` (``log``): the plan, the step in progress, the records;
- :class:`~pitstop.doctor.record.boundaries.StepBoundaries` (``bounds``): optimizer step hooks
  (the first optimizer that steps is the *primary* one and its steps are the steps),
  ``torch.autograd.backward`` (timed, its tensor kept as the step's loss), GradScaler,
  manual parameter updates;
- :class:`~pitstop.doctor.record.observers.ModelObserver` (``forward``): global module forward
  hooks on the outermost module call, and :class:`~pitstop.doctor.record.passes.Passes`
  (``passes``): training vs evaluation forwards, batch size;
- :class:`~pitstop.doctor.record.loaders.LoaderObserver` (``data``): ``DataLoader`` settings and waits;
- :class:`~pitstop.doctor.record.syncs.SyncRecorder` (``sync``): syncs and copies by call site;
- :class:`~pitstop.doctor.record.memory.MemoryRecorder` (``memory``): activations, peaks, graph census;
- :class:`~pitstop.doctor.record.profiled.ProfiledStep` (``profiled``): the profiled step and the trace;
- :class:`~pitstop.doctor.record.stacks.StackSampler` (``sampler``): where host time goes;
- :class:`~pitstop.doctor.record.distributed.DistRecorder` (``dist``, one rank of a torchrun job
  only): collectives, DDP's gradient reduction, batch fingerprints.
- :class:`~pitstop.doctor.record.periodic.PeriodicRecorder` (``periodic``, full mode): where each
  step's evaluation ran and every ``torch.save``, warm-up included, for their period;
- :class:`~pitstop.doctor.record.compile_watch.CompileWatch` (``compile_watch``, both modes): what
  TorchDynamo reports (graph breaks, recompiles, compile time) once the script compiles, and
  :class:`~pitstop.doctor.record.graph_calls.GraphCalls` (``graph_calls``, full mode): compiled graph
  runs and CUDA graph replays per step.

``mode="light"`` installs only the step boundaries (and the compile watch): wall time per step and the loss, for
A/B trials. In full mode the last observed steps alternate with *bare* steps, and the traced
steps follow: both run quiet (``StepLog.quiet``: the hooks return at once, the saved-tensor hook,
stack sampling and CUDA's sync-debug mode are off; the sampler's clock stops outside the
observed and bare steps), so that the bare steps time the script
without the doctor (its overhead, same process, alternating) and the profiler sees the program
as it runs.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from pitstop.doctor.record.boundaries import StepBoundaries
from pitstop.doctor.record.compile_watch import CompileWatch
from pitstop.doctor.record.cores import machine_counters
from pitstop.doctor.record.graph_calls import GraphCalls
from pitstop.doctor.record.loaders import LoaderObserver
from pitstop.doctor.record.memory import ACTIVATION_STEPS, MemoryRecorder
from pitstop.doctor.record.observers import ModelObserver
from pitstop.doctor.record.passes import Passes
from pitstop.doctor.record.periodic import PeriodicRecorder
from pitstop.doctor.record.patching import Patches
from pitstop.doctor.record.profiled import ProfiledStep
from pitstop.doctor.run.spec import StepRecord
from pitstop.doctor.record.stacks import StackSampler
from pitstop.doctor.record.steps import QUIET_KINDS, StepLog, StopDoctor, plan_of
from pitstop.doctor.record.syncs import SyncRecorder

__all__ = ["Instrumentation", "StopDoctor"]


class Instrumentation:
    """The recorders of one run (see the module docstring)."""

    def __init__(self, steps: int, warmup: int = 0, *, mode: str = "full", trace_dir: str | None = None,
                 trace_steps: int = 3, stop: bool = True, distributed: bool = False) -> None:
        self.full = mode == "full"
        self.warmup, self.steps, self.stop, self.trace_dir = warmup, steps, stop, trace_dir
        cuda = torch.cuda.is_available()
        self.notes: list[str] = []
        self.patches = Patches()
        self.machine: dict[str, Any] = {}  # machine counters when the measured part started
        # on CUDA the steps after the observed ones are always profiled: their trace is the GPU evidence
        traced = trace_steps if trace_dir or cuda else 0
        self.log = StepLog(plan_of(steps, warmup, full=self.full, traced=traced), cuda=cuda)
        self.sampler = StackSampler() if self.full else None
        self.memory = MemoryRecorder(self.log, cuda=cuda)
        on_phase = self.memory.phase if cuda and self.full else None
        self.bounds = StepBoundaries(self.log, notes=self.notes, patches=self.patches, full=self.full, stop=stop,
                                     sampler=self.sampler, end_step=self._end_step, restart=self._restart,
                                     on_phase=on_phase, on_loss=self._on_loss if self.full else None,
                                     before_last_step=self.memory.take_grad_bytes if self.full else None)
        self.profiled = ProfiledStep(self.notes, trace_dir)
        self.passes = Passes(self._count)
        self.forward = ModelObserver(self.log, self.bounds, self.passes, self.memory, self.profiled,
                                     sampler=self.sampler, cuda=cuda)
        self.data = LoaderObserver(self.log)
        self.sync = SyncRecorder(self.log, self.data, self.bounds)
        self.dist = None
        if distributed and self.full:
            from pitstop.doctor.record.distributed import DistRecorder

            self.dist = DistRecorder(self.log, self.patches)
        self.graph_calls = GraphCalls(self.patches, cuda=cuda)
        self._compilations = 0  # compilations seen at the last step's end
        self.compile_watch = CompileWatch(self.log.kind, on_arm=self.memory.compiled_code if self.full else None,
                                          on_use=self._compiles if self.full else None,
                                          on_function=self.forward.function_boundary if self.full else None)
        self.periodic = PeriodicRecorder(self.log, self.sampler.sites) if self.sampler is not None else None

    def _compiles(self) -> None:
        """The script compiles: count its compiled calls; on CUDA keep copies of its losses."""
        self.graph_calls.arm()
        self.bounds.copy_losses = self.graph_calls.cuda

    def _on_loss(self, t: Any) -> None:
        self.memory.watch_loss(t)
        self.graph_calls.watch(t)

    def _count(self, mid: int, kind: str, where: str) -> None:
        self.forward.count(mid, kind, where)

    # -- the plan --------------------------------------------------------------------------
    @property
    def records(self) -> list[StepRecord]:
        return self.log.records

    @property
    def index(self) -> int:
        return self.log.index

    @property
    def total(self) -> int:
        return self.log.total

    @property
    def finished(self) -> bool:
        return self.log.finished

    @property
    def observed_done(self) -> int:
        return self.log.observed

    def kind(self, i: int | None = None) -> str | None:
        return self.log.kind(i)

    # -- install / uninstall -------------------------------------------------------------
    def install(self) -> Instrumentation:
        self.bounds.install()
        self.compile_watch.install(self.patches)
        if self.full:
            self.forward.install(self.patches)
            if self.dist is not None:  # before the loader observer: fingerprints run inside its timed wait
                self.dist.install()
            self.data.install(self.patches)
            self.sync.install(self.patches)
            if self.periodic is not None:
                self.periodic.install(self.patches)
            self._quiet(self.log.kind() in QUIET_KINDS)
            sampler, data, forward, log = self.sampler, self.data, self.forward, self.log
            sampler.skip = lambda: data.busy > 0 or forward.depth > 0 or log.kind() != "observed"
            sampler.start()
            sampler.open()
            self.machine = machine_counters()
        self.log.start()
        return self

    def uninstall(self, *, keep_forward_hooks: bool = False) -> None:
        """Remove every hook and patch. ``keep_forward_hooks``: leave the global forward hooks
        (inert: the log is paused) until :meth:`release`: a compiled model's guards include
        them, and the probes time it without recompiling."""
        self.log.pause()
        if self.sampler is not None:
            self.sampler.stop()
        self.profiled.stop()
        self.memory.uninstall(keep_hooks=keep_forward_hooks)
        self.sync.uninstall()
        self.bounds.uninstall()
        if not keep_forward_hooks:
            self.forward.uninstall()
        self.compile_watch.uninstall()
        self.patches.restore()

    def release(self) -> None:
        """Remove the forward hooks :meth:`uninstall` kept."""
        self.forward.uninstall()
        self.memory.release()

    # -- routing the end of a step -----------------------------------------------------------
    def _end_step(self) -> None:
        log = self.log
        rec = log.close()
        kind = rec.kind
        if self.full:
            self.passes.settle(rec, log.records)
            if kind == "observed":
                rec.memory = self.memory.now()
            self.data.end_step(kind)
        self.bounds.new_step()
        if kind == "profiled" and log.cur.phases.get("eval"):
            self.notes.append("the profiled step also ran evaluation forwards: its FLOP count includes them")
        if kind == "observed":
            self.sync.fold()
        self.memory.end_step(kind)
        if self.dist is not None:
            self.dist.end_step(kind, rec.backward_calls)
        self.sync.new_step()
        self.data.new_step()
        log.append(rec)
        if self.full:
            self._transitions(kind)
            self._quiet(log.quiet)
        if log.finished:
            if self.stop:
                raise StopDoctor()
            log.pause()

    def _quiet(self, quiet: bool) -> None:
        """The next step is quiet or not (``StepLog.quiet``): the per-tensor pack hook only where
        activations are counted (warm-up and the first observed steps), the sampler and the CUDA sync-debug
        mode only outside quiet steps."""
        kind = self.log.kind()
        if kind == "warmup" or (kind == "observed" and self.log.observed < ACTIVATION_STEPS):
            # warm-up too: the memory watch's hooks are in place before the first compilation
            # (compiled graphs guard on the global forward hooks) and see the profiled memory step
            self.memory.install(self.bounds)
        else:  # the memory watch's forward hooks stay (an out-of-memory error names its module)
            self.memory.uninstall(watch=False)
        self.sync.quiet(quiet)
        if self.sampler is not None:
            # through the bare steps the clock ticks as in the observed ones (sampling nothing), so
            # that the two differ by the hooks alone (waking the thread again after each bare step
            # would cost the next observed step a GIL handoff); outside the observed and bare steps
            # (warm-up, profiled, traced) it sleeps: a waking sampler only takes the GIL there (on a
            # loaded machine a thread preempted while holding it stalls the main thread)
            self.sampler.paused = self.log.kind() not in ("observed", "bare")
            self.sampler.label = "host"
            self.sampler.open() if not quiet else self.sampler.close()

    def _transitions(self, ended: str) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        compilations = self.compile_watch.compilations
        self.graph_calls.end_step(ended, compiled=compilations != self._compilations)
        self._compilations = compilations
        self.data.read_workers(ended)
        if ended == "observed":
            self.memory.census(self.log.observed, self.log.index)
        self.profiled.transition(ended, self.log.kind(), self.forward, compiles=self.compile_watch.compiles)
        self.log.exclude(t0, c0)  # bookkeeping of rare events is not the script's time

    def _restart(self, t: float, c: float, phases: dict[str, float]) -> None:
        """Manual parameter updates found: the current step started at ``(t, c)``."""
        self.log.restart(t, c, phases)
        self.passes.drop_trained()
        self.sync.new_step()
        self.data.new_step()

    # -- end of run --------------------------------------------------------------------------
    def read_losses(self) -> None:
        """Copy the kept loss tensors to the host once (the only sync the losses cost)."""
        self.log.read_losses()

    def settle_all(self) -> None:
        """End of the run: forwards still waiting for a backward were evaluation."""
        self.passes.settle_all(self.log.records)

    # -- what collect.py reads (each recorder owns it) -------------------------------------------
    trace_path = property(lambda self: self.profiled.trace_path)
    boundary = property(lambda self: self.bounds.boundary)
    primary = property(lambda self: self.bounds.primary)
    optimizers = property(lambda self: self.bounds.optimizers)
    framework = property(lambda self: self.bounds.framework)
    backward_total = property(lambda self: self.bounds.backward_total)
    scaler_calls = property(lambda self: self.bounds.scaler_calls)
    models = property(lambda self: self.forward.models)
    forwards = property(lambda self: self.forward.forwards)
    forward_where = property(lambda self: self.forward.forward_where)
    autocast = property(lambda self: self.forward.autocast)
    input_shapes = property(lambda self: self.forward.input_shapes)
    batch_size = property(lambda self: self.passes.batch_size)
    batches = property(lambda self: self.passes.batches)
    per_step = property(lambda self: self.passes.per_step)
    last_train_args = property(lambda self: self.passes.last_train_args)
    last_train_kwargs = property(lambda self: self.passes.last_train_kwargs)
    train_layout = property(lambda self: self.passes.train_layout)
    loaders = property(lambda self: self.data.loaders)
    data_cpu = property(lambda self: self.data.data_cpu)
    worker_cpu = property(lambda self: self.data.worker_cpu)
    sync_sites = property(lambda self: self.sync.sites)
    cuda_sites = property(lambda self: self.sync.cuda_sites)
    h2d = property(lambda self: self.sync.h2d)
    activations = property(lambda self: self.memory.activations)
    grad_bytes = property(lambda self: self.memory.grad_bytes)
    graph = property(lambda self: self.memory.graph)
    phase_peaks = property(lambda self: self.memory.phase_peaks)
    run_peak = property(lambda self: self.memory.run_peak)
    profile_result = property(lambda self: self.profiled.result)
