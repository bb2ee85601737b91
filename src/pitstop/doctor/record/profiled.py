"""The one profiled step (FLOPs, kernel precision and layout, layer data flow) and the trace.

These measurements disturb timing, so they run on a step of their own after the observed
steps: ``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs, a small
``TorchDispatchMode`` records the dtype and memory format of every matmul and convolution
actually executed (after autocast), and forward hooks record which layer fed which
(a ``Conv2d`` whose output goes straight into a ``BatchNorm2d``, two ``Linear`` layers
with nothing between). ``--trace`` runs a few more steps under ``torch.profiler``.
:class:`ProfiledStep` is the recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`
that starts and stops them at the step boundaries.
"""

from __future__ import annotations

import os
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["KernelCensus", "DataFlow", "StepProfiler", "Tracer", "ProfiledStep"]

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_cudnn_attention", "_scaled_mm"}
_CONV = {"convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution"}

class KernelCensus(TorchDispatchMode):
    """Counts matmuls/convolutions by dtype and convolution inputs by memory format."""

    def __init__(self) -> None:
        super().__init__()
        self.matmul: Counter[str] = Counter()
        self.conv: Counter[str] = Counter()
        self.conv_channels_last = 0
        self.conv_nchw = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in _MATMUL or name in _CONV:
            import torch

            x = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if x is not None:
                dtype = str(x.dtype).replace("torch.", "")
                if name in _MATMUL:
                    self.matmul[dtype] += 1
                else:
                    self.conv[dtype] += 1
                    if x.dim() == 4:
                        if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
                            self.conv_channels_last += 1
                        else:
                            self.conv_nchw += 1
        return func(*args, **(kwargs or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"matmul": dict(self.matmul), "conv": dict(self.conv),
                "conv_channels_last": self.conv_channels_last, "conv_nchw": self.conv_nchw}


class DataFlow:
    """Which leaf layer's output went, untouched, into which next layer (one forward)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        # (module, weak reference to its output tensor, output._version): a strong one kept the
        # last layer's output (a GPT's logits, 13.7 GiB on an H200) alive for the rest of the run,
        # and the doctor's traced step ran out of memory where the script alone did not
        self.last: tuple[Any, Any, int] | None = None
        self.conv_bias_bn: list[list[str]] = []
        self.linear_linear: list[dict[str, Any]] = []

    def pre(self, module, args) -> None:
        from torch import nn

        if self.last is None or not args:
            return
        prev, ref, version = self.last
        x = args[0]
        if x is not ref() or getattr(x, "_version", -1) != version:
            return
        a, b = self.names.get(id(prev), type(prev).__name__), self.names.get(id(module), type(module).__name__)
        if isinstance(prev, nn.modules.conv._ConvNd) and prev.bias is not None \
                and isinstance(module, nn.modules.batchnorm._BatchNorm):
            self.conv_bias_bn.append([a, b])
        if type(prev) is nn.Linear and type(module) is nn.Linear:
            i, h, o = prev.in_features, prev.out_features, module.out_features
            saved = i * h + h * o - i * o
            if saved > 0:
                self.linear_linear.append({"pair": [a, b], "saved_macs": saved, "macs": i * h + h * o})

    def post(self, module, output) -> None:
        if next(module.children(), None) is not None:
            return  # containers: only leaves feed each other
        try:
            self.last = (module, weakref.ref(output), getattr(output, "_version", -1))
        except TypeError:  # a tuple, a dict: no layer takes it as its one input here
            self.last = None


def eager_stance() -> Any:
    """``torch.compiler.set_stance("force_eager")`` in effect from now on (the returned object's
    ``__exit__`` restores the previous stance), or None where torch has no stances (< 2.6) or
    refuses here (inside a compiled region)."""
    import torch

    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if set_stance is None:
        return None
    try:
        return set_stance("force_eager")
    except RuntimeError:
        return None


class StepProfiler:
    """FlopCounterMode + KernelCensus around one step. ``stance`` (:func:`eager_stance`), when
    the script compiles: the step runs eagerly under it, so that dynamo never meets the two
    dispatch modes (a frame it meets under a ``TorchDispatchMode`` is marked "skip" for good:
    the user's compiled function would run eagerly for the rest of the run)."""

    def __init__(self, stance: Any = None) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self.flops = FlopCounterMode(display=False)
        self.census = KernelCensus()
        self.stance = stance
        self.total_flops: int | None = None
        self.active = False

    def start(self) -> None:
        self.flops.__enter__()
        self.census.__enter__()
        self.active = True

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self.census.__exit__(None, None, None)
        self.flops.__exit__(None, None, None)
        if self.stance is not None:
            stance, self.stance = self.stance, None
            stance.__exit__(None, None, None)
        self.total_flops = int(self.flops.get_total_flops())


class Tracer:
    """``torch.profiler`` around a few steps, exported as a Chrome/Perfetto trace. Each traced
    step is marked ``ProfilerStep#N`` (a ``user_annotation``, as ``profile.step()`` marks them
    under a schedule), so ``pitstop trace`` finds the steps in the doctor's trace."""

    def __init__(self, out_dir: str) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.dir = Path(out_dir)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        # no record_shapes: the trace analysis reads no shapes, and recording them slows every
        # operator on the host, which the GPU evidence would report as the script's host time
        self.prof = profile(activities=acts)
        self.path: str | None = None
        self.active = False
        self.steps = 0
        self._mark: Any = None
        self.name = "pitstop_trace.json"

    def start(self) -> None:
        # named now, while the script's process group is up: the traced steps can run to the
        # script's end, after its destroy_process_group (every rank would then write one name)
        self.name = _trace_name()
        self.prof.__enter__()
        self.active = True
        self.step()

    def step(self) -> None:
        """The current traced step ended and the next one begins."""
        from torch.profiler import record_function

        self._end_mark()
        self._mark = record_function(f"ProfilerStep#{self.steps}")
        self._mark.__enter__()
        self.steps += 1

    def _end_mark(self) -> None:
        if self._mark is not None:
            mark, self._mark = self._mark, None
            mark.__exit__(None, None, None)

    def stop(self, *, unfinished: bool = False) -> str | None:
        """Export the trace. ``unfinished``: stopped where no step ended (the script ended
        inside the traced steps): the last mark spans the script's end, not a training step,
        so it is taken out of the file (its events stay, outside any step)."""
        if not self.active:
            return self.path
        self.active = False
        self._end_mark()
        self.prof.__exit__(None, None, None)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / self.name
        self.prof.export_chrome_trace(str(path))
        if unfinished:
            _drop_step_mark(path, f"ProfilerStep#{self.steps - 1}")
        self.path = str(path)
        return self.path


def _drop_step_mark(path: Path, name: str) -> None:
    """Rewrite the trace at ``path`` (atomically) without the step mark ``name``."""
    import json

    from pitstop.atomic import write_atomic

    trace = json.loads(path.read_text(encoding="utf-8"))
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        return
    kept = [e for e in events if not (isinstance(e, dict) and e.get("name") == name)]
    if len(kept) != len(events):
        trace["traceEvents"] = kept
        write_atomic(path, json.dumps(trace))


def _trace_name() -> str:
    """``pitstop_trace.json``; one file per rank in a job of several (``--nproc-per-node N
    --trace DIR``: the folder is then the job's traces, one per rank, as ``pitstop trace DIR``
    reads them). The rank is the process group's, else the one torchrun gave the process
    (``RANK`` of ``WORLD_SIZE`` > 1: a job whose group is not, or no longer, up)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return f"pitstop_trace_rank{dist.get_rank()}.json"
    rank, world = os.environ.get("RANK", ""), os.environ.get("WORLD_SIZE", "")
    if rank.isdigit() and world.isdigit() and int(world) > 1:
        return f"pitstop_trace_rank{rank}.json"
    return "pitstop_trace.json"


class ProfiledStep:
    """The profiled step and the traced steps: started when the next step is of their kind,
    stopped when theirs ends. ``flow`` (the :class:`DataFlow` of the profiled step's
    forwards, fed by the forward observer) stays after the run; ``result`` holds the
    profiled step's ``flops`` and ``kernels``; ``trace_path`` the exported trace."""

    def __init__(self, notes: list[str], trace_dir: str | None) -> None:
        self.notes, self.trace_dir = notes, trace_dir
        #: the trace is the doctor's own (no ``--trace DIR``): removed once analysed
        self.own_trace = trace_dir is None
        self.flow: DataFlow | None = None
        self.result: dict[str, Any] = {}
        self.trace_path: str | None = None
        self._profiler: StepProfiler | None = None
        self._tracer: Tracer | None = None

    def transition(self, ended: str, nxt: str | None, seen: Any, *, compiles: bool = False) -> None:
        """Step ``ended`` is over and the next is of kind ``nxt``; ``seen`` (the forward
        observer) has the models seen so far; ``compiles``: the script compiled something."""
        if ended == "profiled" and self._profiler is not None:
            prof, self._profiler = self._profiler, None
            prof.stop()
            self.result = {"flops": prof.total_flops, "kernels": prof.census.to_dict()}
        if nxt == "profiled":
            self._start(seen.live_models(), compiles or seen.any_compiled())
        if nxt == "traced" and self._tracer is None:
            import tempfile

            self._tracer = Tracer(self.trace_dir or tempfile.mkdtemp(prefix="pitstop-gpu-"))
            self._tracer.start()
        if ended == "traced" and nxt != "traced" and self._tracer is not None:
            self.trace_path = self._tracer.stop()
        elif ended == "traced" and nxt == "traced" and self._tracer is not None:
            self._tracer.step()

    def _start(self, models: list[Any], compiled: bool) -> None:
        names: dict[int, str] = {}
        for model in models:
            names.update({id(m): n or type(m).__name__ for n, m in model.named_modules()})
        self.flow = DataFlow(names)
        stance = eager_stance() if compiled else None
        if compiled and stance is None:
            self.notes.append("FLOPs and kernel dtypes not counted: the script compiles, and this torch cannot run "
                              "the profiled step eagerly (torch.compiler.set_stance, torch >= 2.6)")
            return
        if compiled:
            self.notes.append("the profiled step (FLOPs, kernel dtypes, layer data flow) ran eagerly "
                              "(torch.compiler.set_stance('force_eager')): the FLOPs are the eager program's; "
                              "the compiled code itself is left as it was")
        try:
            self._profiler = StepProfiler(stance)
            self._profiler.start()
        except Exception as exc:
            if stance is not None:
                stance.__exit__(None, None, None)
            self.notes.append(f"FLOP counting unavailable: {exc}")
            self._profiler = None

    def stop(self) -> None:
        """Uninstalling: stop what still runs (a failure is a note, the report matters more)."""
        for obj in (self._profiler, self._tracer):
            if obj is not None and obj.active:
                try:
                    if obj is self._tracer:
                        obj.stop(unfinished=True)
                        self.notes.append("the script ended inside the traced steps: the trace holds the "
                                          f"{obj.steps - 1} traced steps that ended, not the script's end")
                    else:
                        obj.stop()
                except Exception as exc:
                    self.notes.append(f"profiler stop failed: {exc}")
        if self._tracer is not None:
            self.trace_path = self._tracer.path

