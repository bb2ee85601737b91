"""Training forwards vs evaluation forwards, batch size and host time (full mode).

Mixed into :class:`~pitstop.doctor.instrument.Instrumentation`. A forward with gradients
enabled is *training* only when its graph reaches a backward: every such top-level
forward leaves a :class:`Pending` with a gradient hook on its outputs. When the step ends,
pendings whose hook fired are training forwards (their batch counts towards the step's
samples and tokens: gradient accumulation counts every micro-batch); the others wait one
more step (a backward may come in the next step) and are then *evaluation with autograd
on*: their time moves from ``forward`` to ``eval`` in their step's record and they count
as ``eval_with_grad`` forwards (and ``train_mode_eval`` when dropout/batch-norm layers
were in training mode), whatever ``model.training`` said.

``host`` is the time between the step's start (the previous optimizer step) and the first
training forward that no measured phase (DataLoader wait, evaluation) explains: batch
sampling outside a DataLoader (``np.memmap`` slicing, ``torch.stack``, copies to the
device). A :class:`~pitstop.doctor.stacks.StackSampler` samples the main thread's Python
stack during that window to name the source lines that spend it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from pitstop.doctor.batch import BatchInfo, Layout, batch_info, seq_layout

__all__ = ["Passes", "Pending", "MAX_HOOKED_OUTPUTS"]

#: outputs of one forward that get a gradient hook (a backward through any one counts)
MAX_HOOKED_OUTPUTS = 8


@dataclass
class Pending:
    """One top-level forward with gradients enabled, until we know if it was trained."""

    reached: list[bool]
    model: int
    seconds: float
    training: bool
    where: str
    unaccounted: float  # step time before this forward that no phase explains
    batch: BatchInfo | None
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    step: int = -1  # index of the record it belongs to once carried


def _grad_outputs(out: Any, found: list[torch.Tensor], depth: int = 0) -> list[torch.Tensor]:
    if len(found) >= MAX_HOOKED_OUTPUTS or depth > 3:
        return found
    if isinstance(out, torch.Tensor):
        if out.requires_grad:
            found.append(out)
    elif isinstance(out, dict):
        for v in out.values():
            _grad_outputs(v, found, depth + 1)
    elif isinstance(out, (list, tuple)):
        for v in out:
            _grad_outputs(v, found, depth + 1)
    return found


def _mark(box: list[bool]):
    def hook(grad):
        box[0] = True
    return hook


class Passes:
    """See the module docstring; state lives in ``Instrumentation.__init__``."""

    # -- layout of each model's batch ---------------------------------------------------
    def _layout_watch(self, module, args) -> None:
        """Inside the first forward of a model: the first recurrent/attention layer decides."""
        mid, top = self._layout_probe
        lay = seq_layout(module, args, top)
        if lay is not None:
            self.layouts[mid] = lay
            self._layout_probe = None

    def _layout_start(self, module, args, kwargs) -> None:
        if id(module) in self.layouts:
            return
        from pitstop.doctor.batch import primary_input

        found = primary_input(args, kwargs)
        if found is not None and found[1].dim() >= 2:
            self._layout_probe = (id(module), found[1])
        else:
            self.layouts[id(module)] = None

    def _layout_end(self, module) -> None:
        if self._layout_probe is not None and self._layout_probe[0] == id(module):
            self.layouts.setdefault(id(module), None)
            self._layout_probe = None

    # -- forwards ------------------------------------------------------------------------
    def _watch_forward(self, module, args, kwargs, output, seconds: float, where: str, unaccounted: float) -> None:
        outs = _grad_outputs(output, [])
        box = [not outs]  # no output needs a gradient: we cannot tell, count it as training
        for t in outs:
            try:
                t.register_hook(_mark(box))
            except RuntimeError:
                box[0] = True
        layout: Layout | None = self.layouts.get(id(module))
        self.cur.pending.append(Pending(box, id(module), seconds, bool(module.training), where, unaccounted,
                                        batch_info(args, kwargs, layout), args, dict(kwargs or {})))

    def _settle(self, rec) -> None:
        """At the end of a step (``rec`` is its record, not yet appended)."""
        for p in self._carried:
            if p.reached[0]:
                self._trained(p, self.records[p.step] if p.step < len(self.records) else rec)
            else:
                target = self.records[p.step] if p.step < len(self.records) else rec
                self._evaluated(p, target)
        self._carried = []
        first = True
        for p in self.cur.pending:
            if p.reached[0]:
                self._trained(p, rec)
                if first:
                    rec.phases["host"] = rec.phases.get("host", 0.0) + max(0.0, p.unaccounted)
                    first = False
            else:
                p.step = rec.index
                self._carried.append(p)

    def settle_all(self) -> None:
        """End of the run: forwards still waiting for a backward were evaluation."""
        for p in self._carried:
            if p.step < len(self.records):
                rec = self.records[p.step]
                (self._trained if p.reached[0] else self._evaluated)(p, rec)
        self._carried = []
        for p in self.cur.pending:  # a step that never ended: count the kinds, no record to edit
            self._count(p.model, "train" if p.reached[0] else "eval_with_grad", p.where)
            if not p.reached[0] and p.training:
                self._count(p.model, "train_mode_eval", p.where)
        self.cur.pending = []

    def _trained(self, p: Pending, rec) -> None:
        """A training forward: its batch counts for its model in its step (``per_step``:
        record index -> model id -> [samples, tokens, forwards]; collect.py reads the
        primary model's, so that a second model in the same step is not counted twice)."""
        self._count(p.model, "train", p.where)
        counts = self.per_step.setdefault(rec.index, {}).setdefault(p.model, [0, 0, 0])
        counts[2] += 1
        if p.batch is not None:
            counts[0] += p.batch.size
            counts[1] += p.batch.tokens or 0
            self.batches.setdefault(p.model, p.batch)
            if rec.batch_size is None:
                rec.batch_size = p.batch.size
            if self.batch_size is None:
                self.batch_size = p.batch.size
        self.last_train_args[p.model] = p.args
        self.last_train_kwargs[p.model] = p.kwargs
        self.train_layout[p.model] = p.batch.dim if p.batch is not None else 0

    def _evaluated(self, p: Pending, rec) -> None:
        self._count(p.model, "eval_with_grad", p.where)
        if p.training:
            self._count(p.model, "train_mode_eval", p.where)
        rec.phases["forward"] = max(0.0, rec.phases.get("forward", 0.0) - p.seconds)
        rec.phases["eval"] = rec.phases.get("eval", 0.0) + p.seconds

    def _count(self, mid: int, kind: str, where: str) -> None:
        self.forwards[kind] += 1
        self.forward_where.setdefault(kind, where)
        info = self.models.get(mid)
        if info is not None:
            info["forwards"][kind] += 1
