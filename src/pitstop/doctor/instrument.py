"""The in-process instrumentation: step boundaries, phase timing, losses, syncs, memory.

Installed before the user's script runs (by the child bootstrap) or around a step function
(:func:`pitstop.doctor`). Nothing depends on names in the user's code:

- step boundaries: ``torch.optim.optimizer.register_optimizer_step_pre/post_hook`` (global);
  the first optimizer that steps is the *primary* one and its steps are the steps;
- data wait: ``_BaseDataLoaderIter.__next__`` timed; forward: global module forward hooks on
  the outermost module call; backward: ``torch.autograd.backward`` (what ``loss.backward()``
  calls) timed, its tensor kept detached as the step's loss; optimizer: pre to post hook;
- syncs (``syncs.py``), activations (saved-tensor hooks), memory samples and graph census
  (``memory.py``), one profiled step and an optional trace (``profiled.py``).

``mode="light"`` installs only the optimizer hooks and the backward/GradScaler wrappers:
wall time per step and the loss, for A/B trials.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from typing import Any

import torch

from pitstop.doctor import memory as mem
from pitstop.doctor.clocks import StepClocks
from pitstop.doctor.closures import on_first_step, wrap_closure
from pitstop.doctor.cores import WorkerClock, machine_counters
from pitstop.doctor.observers import Observers, first_tensor
from pitstop.doctor.boundaries import ManualUpdates, graph_param
from pitstop.doctor.passes import Passes
from pitstop.doctor.patching import Patches
from pitstop.doctor.spec import StepRecord

__all__ = ["Instrumentation", "StopDoctor"]

perf = time.perf_counter
cpu_clock = time.process_time  # CPU seconds of the whole process (all threads)


class StopDoctor(BaseException):
    """Raised from the optimizer step hook once the planned steps are measured. A
    BaseException, so that a script's ``except Exception`` does not swallow it."""


class _Step:
    __slots__ = ("phases", "losses", "backward_calls", "syncs", "sync_s", "cuda", "batch_size", "h2d", "pending",
                 "data_cpu")

    def __init__(self) -> None:
        self.phases: Counter[str] = Counter()
        self.losses: list[torch.Tensor] = []
        self.backward_calls = 0
        self.syncs: Counter[tuple[str, str]] = Counter()
        self.sync_s: Counter[tuple[str, str]] = Counter()
        self.cuda: Counter[tuple[str, str]] = Counter()
        self.batch_size: int | None = None
        self.h2d: Counter[str] = Counter()
        self.pending: list = []
        self.data_cpu = 0.0


def _function(bound):
    """A plain function around a bound method, so that it binds ``self`` when set on a class."""
    def method(*args, **kwargs):
        return bound(*args, **kwargs)
    method.__wrapped__ = bound
    return method


class Instrumentation(ManualUpdates, Passes, Observers):
    def __init__(self, steps: int, warmup: int = 0, *, mode: str = "full", trace_dir: str | None = None,
                 trace_steps: int = 3, stop: bool = True) -> None:
        self.full = mode == "full"
        #: the plan, as (kind, count) segments: warmup, observed, profiled, traced
        self.plan = [("warmup", warmup), ("observed", steps), ("profiled", 1 if self.full else 0),
                     ("traced", trace_steps if trace_dir and self.full else 0)]
        self.total = sum(n for _, n in self.plan)
        self.warmup, self.steps, self.stop, self.trace_dir = warmup, steps, stop, trace_dir
        self.records: list[StepRecord] = []
        self.loss_tensors: list[list[torch.Tensor]] = []
        self.cur = _Step()
        self.passive = True
        self.finished = False
        self.primary: Any = None
        self.optimizers: dict[int, Any] = {}
        self.models: dict[int, dict[str, Any]] = {}  # id -> {"ref", "forwards": Counter, ...}
        self.loaders: dict[int, dict[str, Any]] = {}
        self.forwards: Counter[str] = Counter()
        self.forward_where: dict[str, str] = {}
        self.autocast: Counter[str] = Counter()
        self.input_shapes: Counter[str] = Counter()
        self.sync_sites: dict[tuple[str, str], list[float]] = {}   # -> [calls, steps, seconds]
        self.cuda_sites: dict[tuple[str, str], list[float]] = {}
        self.h2d: Counter[str] = Counter()
        self.backward_total = 0
        self.scaler_calls = 0
        self.batch_size: int | None = None
        self.last_train_args: dict[int, tuple] = {}
        self.graph: dict[str, Any] = {}
        self.loss_refs: list[weakref.ref] = []
        self.grad_bytes: int | None = None
        self.activations: list[int] = []
        self.trace_path: str | None = None
        self.profile_result: dict[str, Any] = {}
        self.notes: list[str] = []
        self._patches = Patches()
        self._handles: list[Any] = []
        self._scaled: dict[int, torch.Tensor] = {}
        self._depth = 0
        self._top: tuple[float, bool] = (0.0, True)
        self._in_data = 0
        self._in_opt = 0
        self._in_backward = False
        self._opt_t0: dict[int, float] = {}
        self._ac_pending: str | None = None  # device whose autocast state the first inner call confirms
        self._closure_s: dict[int, float] = {}  # seconds in optimizer.step(closure)'s closure
        self.framework: Any = None  # FrameworkInfo, at the first optimizer step
        self._acts: dict[tuple[int, int], int] = {}
        self._param_keys: set[tuple[int, int]] = set()
        self._saved_hooks: Any = None
        self._sync_debug_off: Any = None
        self._profiler: Any = None
        self._flow: Any = None
        self._tracer: Any = None
        self._observed = 0
        #: observed steps after which the live autograd graph is counted (first, middle, last)
        self._census_at = {1, (steps + 1) // 2, steps}
        self._cuda = torch.cuda.is_available()
        self.phase_peaks: dict[str, int] = {}
        self.run_peak = 0
        self.step_start = perf()
        self.cpu_start = cpu_clock()
        self.clocks = StepClocks(cuda=self._cuda)
        # batch layout, training vs evaluation forwards, host time (passes.py)
        self.layouts: dict[int, Any] = {}
        self._layout_probe: tuple[int, torch.Tensor] | None = None
        self._carried: list = []
        self._top_call: tuple = ((), {}, 0.0)
        self._where = "?"
        self.batches: dict[int, Any] = {}  # model id -> BatchInfo of its first training forward
        self.per_step: dict[int, dict[int, list[int]]] = {}
        self.last_train_kwargs: dict[int, dict] = {}
        self.train_layout: dict[int, int] = {}
        self.sampler: Any = None
        # what the cores did during data waits (cores.py)
        self.worker_clock = WorkerClock()
        self.worker_cpu: list[float] = []
        self.data_cpu: list[float] = []
        self.machine: dict[str, Any] = {}
        # step boundaries: "optimizer.step", or "backward" when parameters change without one
        self.boundary: str | None = None
        self._snap: Any = None
        self._mark: tuple[float, float, dict[str, float]] | None = None

    # -- plan ------------------------------------------------------------------------
    @property
    def index(self) -> int:
        return len(self.records)

    def kind(self, i: int | None = None) -> str | None:
        i = self.index if i is None else i
        for kind, n in self.plan:
            if i < n:
                return kind
            i -= n
        return None

    @property
    def observed_done(self) -> int:
        return self._observed

    # -- install / uninstall -------------------------------------------------------------
    def install(self) -> Instrumentation:
        from torch.optim import optimizer as optim_mod

        self._handles.append(optim_mod.register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(optim_mod.register_optimizer_step_post_hook(self._opt_post))
        self._orig_backward = self._patches.set(torch.autograd, "backward", self._backward)
        self._orig_scale = self._patches.set(torch.amp.GradScaler, "scale", _function(self._scale))
        if self.full:
            self._install_full()
            from pitstop.doctor.stacks import StackSampler

            self.sampler = StackSampler()
            self.sampler.skip = lambda: self._in_data > 0 or self._depth > 0 or self.kind() != "observed"
            self.sampler.start()
            self.sampler.open()
            self.machine = machine_counters()
        self.passive = False
        self.step_start = perf()
        self.cpu_start = cpu_clock()
        self.clocks.mark()
        return self

    def _install_full(self) -> None:
        from torch.nn.modules import module as module_mod
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        from pitstop.doctor.syncs import install_sync_patches

        self._handles.append(module_mod.register_module_forward_pre_hook(self._fwd_pre))
        self._handles.append(module_mod.register_module_forward_hook(self._fwd_post, always_call=True))
        self._orig_dl_iter = self._patches.set(DataLoader, "__iter__", _function(self._dl_iter))
        self._orig_next = self._patches.set(_BaseDataLoaderIter, "__next__", _function(self._dl_next))
        self._sync_debug_off = install_sync_patches(self._patches, self._on_sync, self._on_cuda_call)
        if torch.cuda.is_available():
            self._orig_to = self._patches.set(torch.Tensor, "to", _function(self._tensor_to))
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._saved_hooks.__enter__()

    def uninstall(self) -> None:
        self.passive = True
        if self.sampler is not None:
            self.sampler.stop()
        for obj in (self._profiler, self._tracer):
            if obj is not None and obj.active:
                try:
                    obj.stop()
                except Exception as exc:  # keep going: the report matters more
                    self.notes.append(f"profiler stop failed: {exc}")
        if self._tracer is not None:
            self.trace_path = self._tracer.path
        if self._saved_hooks is not None:
            try:
                self._saved_hooks.__exit__(None, None, None)
            except Exception:
                pass
            self._saved_hooks = None
        if self._sync_debug_off is not None:
            self._sync_debug_off()
            self._sync_debug_off = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._patches.restore()

    # -- optimizer hooks: the step boundaries ----------------------------------------
    def _opt_pre(self, opt, args, kwargs) -> None:
        if self.finished and self.stop:
            raise StopDoctor()
        if self.passive:
            return
        if self.primary is None:
            if self.boundary == "backward":
                return  # steps are already counted by backward calls
            self.primary = opt
            self.framework = on_first_step(self, opt)
            self.boundary = "optimizer.step"
        self.optimizers.setdefault(id(opt), opt)
        self._in_opt += 1
        if self.sampler is not None:
            self.sampler.close()
        if self.full and opt is self.primary and self.kind() == "observed" and self.observed_done == self.steps - 1:
            self.grad_bytes = mem.grad_bytes(p for g in opt.param_groups for p in g["params"])
        if self._cuda:
            self._cuda_phase("optimizer", True)
        self._opt_t0[id(opt)] = perf()
        return wrap_closure(self, opt, args, kwargs)

    def _opt_post(self, opt, args, kwargs) -> None:
        if self.passive or self.primary is None:
            return
        if self._cuda:
            self._cuda_phase("optimizer", False)
        self._in_opt = max(0, self._in_opt - 1)
        # forward/backward inside optimizer.step(closure) are measured as themselves, not as optimizer
        inner = self._closure_s.pop(id(opt), 0.0)
        self.cur.phases["optimizer"] += max(0.0, perf() - self._opt_t0.pop(id(opt), perf()) - inner)
        if self.sampler is not None:
            self.sampler.open()
        if opt is self.primary:
            self._end_step()

    def _end_step(self) -> None:
        now, cpu_now = perf(), cpu_clock()
        kind = self.kind() or "extra"
        cur = self.cur
        rec = StepRecord(index=self.index, kind=kind, wall=now - self.step_start, cpu=cpu_now - self.cpu_start,
                         phases=dict(cur.phases), backward_calls=cur.backward_calls, batch_size=cur.batch_size,
                         **self.clocks.lap())
        if self.full:
            self._settle(rec)
            rec.memory = self._memory_now()
            if kind == "observed":
                self.data_cpu.append(cur.data_cpu)
        self.records.append(rec)
        self.loss_tensors.append(cur.losses)
        self._scaled.clear()
        if kind == "profiled" and cur.phases.get("eval"):
            self.notes.append("the profiled step also ran evaluation forwards: its FLOP count includes them")
        if kind == "observed":
            self._observed += 1
            self._fold_sites(cur)
            if self.full and self._acts:
                self.activations.append(sum(self._acts.values()))
        self._acts = {}
        self.cur = _Step()
        self.step_start, self.cpu_start = perf(), cpu_clock()
        if self.full:
            self._transitions(kind)
            if self.sampler is not None:
                self.sampler.label = "host"
                self.sampler.open()
        if self.index >= self.total:
            self.finished = True
            if self.stop:
                raise StopDoctor()
            self.passive = True

    def _transitions(self, ended: str) -> None:
        t0, c0 = perf(), cpu_clock()
        observed = self.observed_done
        if self.worker_clock.last and ended in ("warmup", "observed"):
            spent = self.worker_clock.read()
            if ended == "observed":
                self.worker_cpu.append(spent)
        if ended == "observed" and observed in self._census_at:
            self.graph.setdefault("nodes", []).append(mem.graph_nodes())
            self.graph.setdefault("steps", []).append(self.index)
            if observed == self.steps:
                prior = self.loss_refs[:-1]
                self.graph["live_losses"] = sum(1 for r in prior if r() is not None)
                self.graph["losses_tracked"] = len(prior)
        nxt = self.kind()
        if ended == "profiled" and self._profiler is not None:
            self._stop_profiled()
        if nxt == "profiled":
            self._start_profiled()
        if nxt == "traced" and self._tracer is None:
            from pitstop.doctor.profiled import Tracer

            self._tracer = Tracer(self.trace_dir)
            self._tracer.start()
        if ended == "traced" and nxt != "traced" and self._tracer is not None:
            self.trace_path = self._tracer.stop()
        self.step_start += perf() - t0  # bookkeeping of rare events is not the script's time
        self.cpu_start += cpu_clock() - c0

    def _start_profiled(self) -> None:
        from pitstop.doctor.profiled import DataFlow, StepProfiler

        names: dict[int, str] = {}
        for info in self.models.values():
            model = info["ref"]()
            if model is not None:
                names.update({id(m): n or type(m).__name__ for n, m in model.named_modules()})
        self._flow = DataFlow(names)
        if any(info.get("compiled") for info in self.models.values()):
            self.notes.append("FLOPs and kernel dtypes not counted: the model is torch.compile'd")
            return
        try:
            self._profiler = StepProfiler()
            self._profiler.start()
        except Exception as exc:
            self.notes.append(f"FLOP counting unavailable: {exc}")
            self._profiler = None

    def _stop_profiled(self) -> None:
        prof, self._profiler = self._profiler, None
        prof.stop()
        self.profile_result = {"flops": prof.total_flops, "kernels": prof.census.to_dict()}

    def _memory_now(self) -> int | None:
        if self._cuda and torch.cuda.is_initialized():
            return int(torch.cuda.memory_allocated())
        return mem.rss_bytes()

    def _fold_sites(self, cur: _Step) -> None:
        for key, n in cur.syncs.items():
            entry = self.sync_sites.setdefault(key, [0, 0, 0.0])
            entry[0] += n
            entry[1] += 1
            entry[2] += cur.sync_s[key]
        for key, n in cur.cuda.items():
            entry = self.cuda_sites.setdefault(key, [0, 0, 0.0])
            entry[0] += n
            entry[1] += 1
        self.h2d.update(cur.h2d)

    # -- backward and losses ---------------------------------------------------------------
    def _backward(self, tensors, *args, **kwargs):
        if self.passive:
            return self._orig_backward(tensors, *args, **kwargs)
        undecided = self.primary is None and self.boundary is None
        if undecided and self._snap is not None:
            self._check_manual_update()
            undecided = self.boundary is None
        t = tensors if isinstance(tensors, torch.Tensor) else first_tensor(tensors)
        watch = graph_param(t) if undecided and t is not None else None
        if t is not None:
            base = self._scaled.pop(id(t), t)
            v = base.detach()
            self.cur.losses.append(v.reshape(()) if v.numel() == 1 else v.float().sum())
            if self.full:
                self.loss_refs.append(weakref.ref(t))
        self._in_backward = True
        if self._cuda:
            self._cuda_phase("backward", True)
        if self.sampler is not None:
            self.sampler.close()
        t0 = perf()
        try:
            out = self._orig_backward(tensors, *args, **kwargs)
        finally:
            if self.sampler is not None:
                self.sampler.open()
            if self._cuda:
                self._cuda_phase("backward", False)
            self._in_backward = False
            self.cur.phases["backward"] += perf() - t0
            self.cur.backward_calls += 1
            self.backward_total += 1
        if self.boundary == "backward":
            self._end_step()
        elif watch is not None and self.primary is None and self.boundary is None:
            self._snapshot(watch)
        return out

    def _scale(self, scaler, outputs):
        out = self._orig_scale(scaler, outputs)
        if not self.passive:
            self.scaler_calls += 1
            if isinstance(out, torch.Tensor) and isinstance(outputs, torch.Tensor):
                self._scaled[id(out)] = outputs
        return out

    # -- end of run --------------------------------------------------------------------------
    def read_losses(self) -> None:
        """Copy the kept loss tensors to the host once (the only sync the losses cost)."""
        try:
            self.clocks.resolve(self.records)  # CUDA step times from events, same single sync
        except Exception:
            pass
        for rec, tensors in zip(self.records, self.loss_tensors):
            if tensors:
                try:
                    rec.loss = float(sum(float(t.float()) for t in tensors))
                except Exception:
                    rec.loss = None
        self.loss_tensors = [[] for _ in self.loss_tensors]
