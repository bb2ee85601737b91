"""Training forwards vs evaluation forwards, batch size and host time (full mode).

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation`, fed by the forward
observer (:class:`~pitstop.doctor.record.observers.ModelObserver`). A forward with gradients
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
device). A :class:`~pitstop.doctor.record.stacks.StackSampler` samples the main thread's Python
stack during that window to name the source lines that spend it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from pitstop.doctor.record.batch import BatchInfo, Layout, batch_info

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


def _detached(x: Any) -> Any:
    """``x`` with every tensor that autograd produced detached (storage shared, no graph kept)."""
    if isinstance(x, torch.Tensor):
        return x.detach().requires_grad_(x.requires_grad) if x.grad_fn is not None else x
    if type(x) in (tuple, list):
        return type(x)(_detached(v) for v in x)
    if isinstance(x, dict):
        return {k: _detached(v) for k, v in x.items()}
    return x


def _mark(box: list[bool]):
    def hook(grad):
        box[0] = True
    return hook


class Passes:
    """See the module docstring. ``count(model_id, kind, where)`` counts a decided forward
    (the forward observer's :meth:`~pitstop.doctor.record.observers.ModelObserver.count`)."""

    def __init__(self, count: Callable[[int, str, str], None]) -> None:
        self.count = count
        self.pending: list[Pending] = []  # forwards of the step in progress
        self.carried: list[Pending] = []  # forwards of the last step still undecided
        self.batches: dict[int, BatchInfo] = {}  # model id -> BatchInfo of its first training forward
        #: record index -> model id -> [samples, tokens, forwards]
        self.per_step: dict[int, dict[int, list[int]]] = {}
        self.last_train_args: dict[int, tuple] = {}
        self.last_train_kwargs: dict[int, dict] = {}
        self.train_layout: dict[int, int] = {}
        self._kept_size: dict[int, int] = {}  # model id -> batch size of the args kept for the probes
        self.batch_size: int | None = None

    def watch(self, module, args, kwargs, output, seconds: float, where: str, unaccounted: float,
              layout: Layout | None) -> None:
        """A top-level forward with gradients enabled just ended."""
        outs = _grad_outputs(output, [])
        box = [not outs]  # no output needs a gradient: we cannot tell, count it as training
        for t in outs:
            try:
                t.register_hook(_mark(box))
            except RuntimeError:
                box[0] = True
        batch = batch_info(args, kwargs, layout)
        if module.training and (batch.size if batch is not None else 0) >= self._kept_size.get(id(module), 0):
            # this forward's batch will replace the probes' batch: let the last one go now, so that
            # the doctor holds no batch of an earlier step through this step's work (the script
            # alone would not); the pending forward holds this one until its step ends
            self.last_train_args.pop(id(module), None)
            self.last_train_kwargs.pop(id(module), None)
        self.pending.append(Pending(box, id(module), seconds, bool(module.training), where, unaccounted,
                                    batch, args, dict(kwargs or {})))

    def drop_trained(self) -> None:
        """The step restarts (manual updates found): forwards already trained belong to the
        steps before it."""
        self.pending = [q for q in self.pending if not q.reached[0]]

    def settle(self, rec, records: list) -> None:
        """At the end of a step (``rec`` is its record, not yet appended to ``records``)."""
        for p in self.carried:
            target = records[p.step] if p.step < len(records) else rec
            if p.reached[0]:
                self._trained(p, target)
            else:
                self._evaluated(p, target)
        self.carried = []
        first = True
        for p in self.pending:
            if p.reached[0]:
                self._trained(p, rec)
                if first:
                    rec.phases["host"] = rec.phases.get("host", 0.0) + max(0.0, p.unaccounted)
                    first = False
            else:
                p.step = rec.index
                self.carried.append(p)
        self.pending = []

    def settle_all(self, records: list) -> None:
        """End of the run: forwards still waiting for a backward were evaluation."""
        for p in self.carried:
            if p.step < len(records):
                rec = records[p.step]
                (self._trained if p.reached[0] else self._evaluated)(p, rec)
        self.carried = []
        for p in self.pending:  # a step that never ended: count the kinds, no record to edit
            self.count(p.model, "train" if p.reached[0] else "eval_with_grad", p.where)
            if p.reached[0]:
                self._keep(p)
            if not p.reached[0] and p.training:
                self.count(p.model, "train_mode_eval", p.where)
        self.pending = []

    def _trained(self, p: Pending, rec) -> None:
        """A training forward: its batch counts for its model in its step (``per_step``;
        collect.py reads the primary model's, so that a second model in the same step is not
        counted twice)."""
        self.count(p.model, "train", p.where)
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
        self._keep(p)

    def _keep(self, p: Pending) -> None:
        """The probes' batch: the last full one (an epoch's short last batch never replaces it)."""
        size = p.batch.size if p.batch is not None else 0
        if size >= self._kept_size.get(p.model, 0):  # detached: the doctor must not keep a step's graph alive
            self._kept_size[p.model] = size
            self.last_train_args[p.model] = _detached(p.args)
            self.last_train_kwargs[p.model] = _detached(p.kwargs)
            self.train_layout[p.model] = p.batch.dim if p.batch is not None else 0

    def _evaluated(self, p: Pending, rec) -> None:
        self.count(p.model, "eval_with_grad", p.where)
        if p.training:
            self.count(p.model, "train_mode_eval", p.where)
        rec.phases["forward"] = max(0.0, rec.phases.get("forward", 0.0) - p.seconds)
        rec.phases["eval"] = rec.phases.get("eval", 0.0) + p.seconds
