"""Step boundaries: the optimizer step hooks, ``loss.backward()`` and manual updates.

:class:`StepBoundaries` is the recorder that decides when a step ends. The global
``torch.optim.optimizer.register_optimizer_step_pre/post_hook`` pair times every optimizer
step; the first optimizer that steps is the *primary* one and its post hook ends the step.
``torch.autograd.backward`` (what ``loss.backward()`` calls) is timed and its tensor kept
detached as the step's loss (unscaled when ``GradScaler.scale`` made it).

Step boundaries without a torch optimizer (:class:`ManualUpdates`): until a ``torch.optim``
optimizer steps, each backward call remembers a few values of one parameter reached from
the loss's graph; when they have changed by the next backward call while no optimizer
stepped, the script updates its parameters by hand (``p.data.add_(p.grad, alpha=-lr)``,
word_language_model's default): from then on every backward call ends a step, the report
says so (``step_boundary == "backward"`` and a note), and the run does not wait for its
timeout. Gradient accumulation with an optimizer leaves the parameters unchanged between
its backward calls, so it is never taken for manual updates. Works in light mode too (the
parameter comes from the graph, not from the forward hooks).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import torch

from pitstop.doctor.record.closures import on_first_step, wrap_closure
from pitstop.doctor.record.batch import first_tensor
from pitstop.doctor.record.patching import Patches, as_method
from pitstop.doctor.record.steps import StepLog, StopDoctor

__all__ = ["StepBoundaries", "ManualUpdates", "graph_param", "MANUAL_NOTE"]

perf = time.perf_counter
cpu_clock = time.process_time

MANUAL_NOTE = ("no torch.optim optimizer stepped, but the parameters changed between backward calls (a manual "
               "update such as p.data.add_(p.grad, alpha=-lr)): each backward call ends a step, and the update's "
               "time is counted in 'host' (before the next forward)")


def graph_param(t: torch.Tensor, limit: int = 256) -> torch.Tensor | None:
    """A leaf tensor that requires grad (a parameter) reached from ``t``'s autograd graph."""
    fn = getattr(t, "grad_fn", None)
    seen, todo = 0, [fn] if fn is not None else []
    while todo and seen < limit:
        node = todo.pop()
        seen += 1
        var = getattr(node, "variable", None)
        if isinstance(var, torch.Tensor) and var.requires_grad:
            return var
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return None


class ManualUpdates:
    """Watches one parameter between backward calls (see the module docstring)."""

    def __init__(self) -> None:
        self.snap: tuple[torch.Tensor, torch.Tensor] | None = None
        #: (perf, process time, phases) when the snapshot was taken: where the next step starts
        self.mark: tuple[float, float, dict[str, float]] | None = None

    def snapshot(self, p: torch.Tensor, phases: dict[str, float]) -> None:
        """Remember a few values of one trained parameter (until an optimizer steps)."""
        if p.grad is not None and p.numel():
            try:
                self.snap = (p, p.detach().reshape(-1)[:256].clone())
            except RuntimeError:  # storage freed (FSDP's unsharded parameter, resharded): not watchable
                return
            self.mark = (perf(), cpu_clock(), dict(phases))

    def changed(self) -> tuple[float, float, dict[str, float]] | None:
        """The mark of the snapshot when the parameter changed since (then watching ends)."""
        if self.snap is None:
            return None
        p, before = self.snap
        try:
            if torch.equal(p.detach().reshape(-1)[:256], before):
                return None
        except RuntimeError:  # its storage was freed since (FSDP resharded it): stop watching
            self.snap = None
            return None
        self.snap = None
        return self.mark


class StepBoundaries:
    """Optimizer and backward hooks: step boundaries, optimizer/backward phases, losses.

    ``end_step`` is called when a step ends; ``restart(t, c, phases)`` when manual updates
    are found (the current step started at the last snapshot); ``on_phase(phase, start)``
    around the backward and optimizer phases (memory peaks), ``on_loss(tensor)`` for each
    backward's tensor, ``before_last_step(optimizer)`` at the primary optimizer's last
    observed step; None when not wanted."""

    def __init__(self, log: StepLog, *, notes: list[str], patches: Patches, full: bool, stop: bool,
                 sampler: Any, end_step: Callable[[], None], restart: Callable[[float, float, dict], None],
                 on_phase: Callable[[str, bool], None] | None = None,
                 on_loss: Callable[[torch.Tensor], None] | None = None,
                 before_last_step: Callable[[Any], None] | None = None) -> None:
        self.log, self.notes, self.patches, self.full, self.stop = log, notes, patches, full, stop
        self.sampler = sampler
        self.end_step, self.restart, self.on_phase, self.on_loss = end_step, restart, on_phase, on_loss
        self.primary: Any = None
        self.optimizers: dict[int, Any] = {}
        self.framework: Any = None  # FrameworkInfo, at the first optimizer step
        #: "optimizer.step", or "backward" when parameters change without one
        self.boundary: str | None = None
        self.backward_total = 0
        self.scaler_calls = 0
        self.in_opt = 0  # inside an optimizer step (not its closure): syncs there are not the script's
        self.in_backward = False
        #: keep a copy of each loss, not a view (set once a script compiles on CUDA: a CUDA-graphed
        #: step's outputs live in its graph's static memory, which a kept view would hold across replays)
        self.copy_losses = False
        #: called at the primary optimizer's last observed step, before it runs (gradient bytes)
        self.before_last_step = before_last_step
        self.manual = ManualUpdates()
        self._scaled: dict[int, torch.Tensor] = {}
        self._opt_t0: dict[int, float] = {}
        self._closure_s: dict[int, float] = {}  # seconds in optimizer.step(closure)'s closure
        self._orig_backward: Any = None
        self._orig_scale: Any = None
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.optim import optimizer as optim_mod

        self._handles.append(optim_mod.register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(optim_mod.register_optimizer_step_post_hook(self._opt_post))
        self._orig_backward = self.patches.set(torch.autograd, "backward", self._backward)
        self._orig_scale = self.patches.set(torch.amp.GradScaler, "scale", as_method(self._scale))

    def uninstall(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def new_step(self) -> None:
        self._scaled.clear()

    # -- optimizer hooks -----------------------------------------------------------------
    def _opt_pre(self, opt, args, kwargs) -> None:
        log = self.log
        if log.finished and self.stop:
            raise StopDoctor()
        if log.passive:
            return
        if self.primary is None:
            if self.boundary == "backward":
                return  # steps are already counted by backward calls
            self.primary = opt
            self.framework = on_first_step(opt, notes=self.notes, patches=self.patches, full=self.full)
            if self.sampler is not None:  # a framework call of the user's runs the loop: sites look below it
                self.sampler.learn_loop(sys._getframe(1))
            self.boundary = "optimizer.step"
        self.optimizers.setdefault(id(opt), opt)
        self.in_opt += 1
        if self.sampler is not None:
            self.sampler.close()
        if self.before_last_step is not None and opt is self.primary and log.kind() == "observed" \
                and log.observed == log.steps - 1:
            self.before_last_step(opt)
        if self.on_phase is not None:
            self.on_phase("optimizer", True)
        self._opt_t0[id(opt)] = perf()
        wrapped = wrap_closure(opt, args, kwargs, self._closure_enter, self._closure_exit)
        if wrapped is not None:
            self._closure_s[id(opt)] = 0.0
        return wrapped

    def _closure_enter(self) -> None:
        self.in_opt -= 1  # the user's code: its syncs count again

    def _closure_exit(self, key: int, seconds: float) -> None:
        self._closure_s[key] = self._closure_s.get(key, 0.0) + seconds
        self.in_opt += 1

    def _opt_post(self, opt, args, kwargs) -> None:
        if self.log.passive or self.primary is None:
            return
        if self.on_phase is not None:
            self.on_phase("optimizer", False)
        self.in_opt = max(0, self.in_opt - 1)
        # forward/backward inside optimizer.step(closure) are measured as themselves, not as optimizer
        inner = self._closure_s.pop(id(opt), 0.0)
        self.log.cur.phases["optimizer"] += max(0.0, perf() - self._opt_t0.pop(id(opt), perf()) - inner)
        if self.sampler is not None:
            self.sampler.open()
        if opt is self.primary:
            self.end_step()

    # -- backward and losses ---------------------------------------------------------------
    def _backward(self, tensors, *args, **kwargs):
        log = self.log
        if log.passive:
            return self._orig_backward(tensors, *args, **kwargs)
        undecided = self.primary is None and self.boundary is None
        if undecided and self.manual.snap is not None:
            mark = self.manual.changed()
            if mark is not None:
                self.boundary = "backward"
                self.notes.append(MANUAL_NOTE)
                self.restart(*mark)
            undecided = self.boundary is None
        t = tensors if isinstance(tensors, torch.Tensor) else first_tensor(tensors)
        watch = graph_param(t) if undecided and t is not None else None
        cur = log.cur
        if t is not None:
            base = self._scaled.pop(id(t), t)
            v = base.detach().clone() if self.copy_losses else base.detach()
            cur.losses.append(v.reshape(()) if v.numel() == 1 else v.float().sum())
            if self.on_loss is not None:
                self.on_loss(t)
        self.in_backward = True
        if self.on_phase is not None:
            self.on_phase("backward", True)
        if self.sampler is not None:
            self.sampler.close()
        t0 = perf()
        try:
            out = self._orig_backward(tensors, *args, **kwargs)
        finally:
            if self.sampler is not None:
                self.sampler.open()
            if self.on_phase is not None:
                self.on_phase("backward", False)
            self.in_backward = False
            cur = log.cur
            cur.phases["backward"] += perf() - t0
            cur.backward_calls += 1
            self.backward_total += 1
        if self.boundary == "backward":
            self.end_step()
        elif watch is not None and self.primary is None and self.boundary is None:
            self.manual.snapshot(watch, log.cur.phases)
        return out

    def _scale(self, scaler, outputs):
        out = self._orig_scale(scaler, outputs)
        if not self.log.passive:
            self.scaler_calls += 1
            if isinstance(out, torch.Tensor) and isinstance(outputs, torch.Tensor):
                self._scaled[id(out)] = outputs
        return out
