"""What fits: the largest batch under a memory limit, and what each memory fix would save (torch-free).

The step's peak is modelled from what was measured (:class:`FitBasis`): at each moment that
can be the peak (each local maximum of the profiled step, by category) the bytes alive are
``fixed + batch * per_sample``, ``fixed`` what does not grow with the batch (parameters, the
gradients alive then, optimizer state) and ``per_sample`` the rest (activations saved for
backward, temporaries) divided by the samples of one forward; the peak at a batch is the
largest of those moments (the end of the forward at large batches, the end of the backward or
the optimizer step at small ones). The moments come from the profiled memory step
(:class:`~pitstop.doctor.analysis.oom_records.MemoryProfile`) when the run had one, else the
moment of an out-of-memory failure is the only one (a lower bound of the need: the step had
not reached its peak).

The limit is ``--memory-budget`` when given, else the device's capacity; a batch fits when its
need times ``1 + margin`` stays under it. On CUDA the need is the predicted peak plus room for
one more of the step's largest allocation (``FitBasis.room``): the caching allocator serves a
large tensor from one free piece, and the pieces freed earlier in the step can all be smaller
(fragmentation); from a failure, the largest is the allocation that failed. On an H200 a batch
predicted to peak at 126 of 139.8 GiB failed for want of a 15.3 GiB piece with 14.2 GiB free in
split blocks (docs/gpu/h200.md); without expandable segments
(``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``) nothing bounds that loss lower.

Each memory fix of the catalog (face D,
:class:`MemoryFix`, subclassed in the tip modules) says what it saves *for this model*: bytes
off the fixed part, per sample, off the optimizer's peak, measured or computed from this
run's sizes, and its cost in step time where known. The fixes are ranked by memory saved per
time lost: those that cost nothing (or speed the step up) first, then by bytes per share of
step time, then those whose cost is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import ClassVar

from pitstop.catalog import Face
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.oom_records import MemoryParts, MemoryProfile, OomRecord
from pitstop.units import mib

__all__ = ["MemoryFix", "FixEstimate", "FitBasis", "RankedFix", "MemoryFit", "assess", "basis_of", "largest_batch",
           "DEFAULT_MARGIN"]

#: the safety margin on the predicted peak (allocator rounding, the cache, what the model misses)
DEFAULT_MARGIN = 0.10


@dataclass(frozen=True)
class FitBasis:
    """The measured step as moments that can be its peak (see the module docstring): each a
    :class:`~pitstop.doctor.analysis.oom_records.MemoryParts` at ``batch`` samples per forward,
    its parameters, gradients and optimizer state fixed, its activations and temporaries
    proportional to the batch. ``source``: ``"profile"`` (the profiled step) or
    ``"failure"`` (the moment of an out-of-memory error)."""

    source: str
    device: str
    batch: float
    moments: list[MemoryParts]
    micro_batches: int = 1
    #: room kept free for the allocator (CUDA): ``(bytes at no sample, bytes per sample)`` of the
    #: step's largest allocation; (0, 0) where none is kept (the CPU, or nothing measured)
    room: tuple[float, float] = (0.0, 0.0)

    @property
    def top(self) -> MemoryParts:
        """The moment that is the peak at this batch."""
        return max(self.moments, key=lambda m: m.attributed)

    @property
    def fixed(self) -> int:
        return self.top.fixed

    @property
    def per_sample(self) -> float:
        t = self.top
        return (t.activations + t.temporaries) / self.batch if self.batch else 0.0

    @property
    def params(self) -> int:
        return self.top.params

    @property
    def grads(self) -> int:
        return self.top.grads

    @property
    def optimizer_state(self) -> int:
        return self.top.optimizer_state

    @property
    def activations(self) -> int:
        return self.top.activations

    @property
    def full_grads(self) -> int:
        """Gradient bytes when every parameter has its gradient (the most any moment held)."""
        return max(m.grads for m in self.moments)

    def lines(self, fix: FixEstimate | None = None) -> list[tuple[float, float]]:
        """(bytes at no sample, bytes per sample) of each moment, with ``fix`` applied. In the
        optimizer step the temporaries are the optimizer's (shaped like the parameters): fixed."""
        out = []
        n = self.batch or 1.0
        for i, m in enumerate(self.moments):
            opt = m.phase == "optimizer"
            fixed = m.fixed + (m.temporaries if opt else 0)
            var = m.activations + (0 if opt else m.temporaries)
            if fix is not None:
                fixed -= fix.fixed_saved
                if fix.grads_held:
                    fixed += self.full_grads - m.grads
                var -= min(m.activations, m.activations * fix.activation_share)
                if i < len(fix.moment_saved):
                    var -= fix.moment_saved[i]
            out.append((max(0.0, fixed), max(0.0, var) / n))
        return out

    def peak(self, batch: float, fix: FixEstimate | None = None) -> float:
        """Predicted peak at ``batch`` samples per forward (with ``fix``)."""
        return max(f + batch * v for f, v in self.lines(fix))

    def need(self, batch: float, fix: FixEstimate | None = None) -> float:
        """What the step needs at ``batch``: its peak and the allocator's room."""
        return self.peak(batch, fix) + self.room[0] + batch * self.room[1]

    def need_lines(self, fix: FixEstimate | None = None) -> list[tuple[float, float]]:
        """:meth:`lines` with the allocator's room added to each moment."""
        return [(f + self.room[0], v + self.room[1]) for f, v in self.lines(fix)]


@dataclass(frozen=True)
class FixEstimate:
    """What one fix saves on this model: ``fixed_saved`` bytes off the fixed part (negative:
    it adds some), ``activation_share`` of the activations alive at any moment,
    ``moment_saved`` the bytes it saves of each moment's activations and temporaries at the
    measured batch (in the order of :attr:`FitBasis.moments`), ``grads_held``: every gradient is
    alive at every moment (micro-batches after the first);
    ``how``: ``"measured"`` or ``"computed"`` (from this run's sizes), ``basis`` the numbers
    behind it; ``time_cost``: share of the step time it adds (negative: it saves time; None:
    unknown), ``cost_basis`` why; ``fix``: what to do; ``caveat``: what it changes besides
    memory. ``batch``: the samples per forward the fix itself sets (accumulation), else None."""

    code: str
    title: str
    fixed_saved: int = 0
    activation_share: float = 0.0
    moment_saved: list[float] = field(default_factory=list)
    grads_held: bool = False
    how: str = "computed"
    basis: str = ""
    time_cost: float | None = None
    cost_basis: str = ""
    fix: str = ""
    caveat: str = ""
    batch: float | None = None


class MemoryFix(Face, face="D"):
    """A tip's memory fix (face D): :meth:`estimate` yields what it would save on this run
    (:class:`FixEstimate`), or nothing when it does not apply. ``limit`` is the memory the
    run must fit in (bytes), ``need`` what it needs now (the predicted peak, or the failed
    step's need)."""

    title: ClassVar[str] = ""

    def estimate(self, basis: FitBasis, obs: Observations, *, limit: int | None, need: float,
                 oom: OomRecord | None) -> Iterable[FixEstimate]:
        raise NotImplementedError


@dataclass(frozen=True)
class RankedFix:
    """A fix with what it saves at this run's batch (``saves``: predicted peak before minus
    after), the peak after, and the largest batch that then fits."""

    estimate: FixEstimate
    saves: int
    peak_after: int
    fits: bool | None
    largest_batch: int | None


@dataclass(frozen=True)
class MemoryFit:
    """The answer: the ``limit`` (``limit_source``: the budget or the device's capacity) and
    ``margin``; the predicted ``peak`` at this run's batch and whether it ``fits``; the
    ``largest_batch`` whose peak fits exactly and ``largest_batch_margin`` with the margin
    (None: not even one sample; the fixed part alone is over); the ranked ``fixes``;
    ``shown``: whether the report shows it (a failure, a budget, or a peak that does not fit)."""

    basis: FitBasis
    limit: int | None
    limit_source: str
    margin: float
    peak: int
    fits: bool | None
    largest_batch: int | None
    largest_batch_margin: int | None
    fixes: list[RankedFix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the report shows it: the run ran out of memory, a budget was asked, or the predicted
    #: peak with the margin does not fit the device
    shown: bool = False


def largest_batch(basis: FitBasis, limit: float, fix: FixEstimate | None = None) -> int | None:
    """The most samples per forward whose need (peak and room) stays <= ``limit`` (None: none)."""
    best = math.inf
    for fixed, per in basis.need_lines(fix):
        if fixed > limit:
            return None
        if per > 0:
            best = min(best, (limit - fixed) / per)
    if best == math.inf:
        return None
    b = math.floor(best)
    return b if b >= 1 else None


def basis_of(profile: MemoryProfile | None, oom: OomRecord | None) -> FitBasis | None:
    """The moments from the profiled step, else the failure (see the module docstring)."""
    if profile is not None and profile.batch and profile.peak:
        moments = profile.moments or [profile.at_peak]
        grows = profile.largest_category in ("activation", "temporary")
        return FitBasis(source="profile", device=profile.device, batch=profile.micro_batch, moments=moments,
                        micro_batches=profile.micro_batches,
                        room=_room(profile.device, profile.largest, profile.micro_batch if grows else None))
    if oom is not None and oom.parts is not None and oom.batch_size:
        p = oom.parts
        need = replace(p, temporaries=p.temporaries + (oom.tried or 0))
        return FitBasis(source="failure", device=oom.device, batch=oom.batch_size, moments=[need],
                        room=_room(oom.device, oom.tried or 0, oom.batch_size))
    return None


def _room(device: str, largest: int, batch: float | None) -> tuple[float, float]:
    """The allocator's room (CUDA only): the largest allocation, per sample when it grows
    with the batch (``batch`` its samples), else fixed."""
    if not device.startswith("cuda") or largest <= 0:
        return (0.0, 0.0)
    return (0.0, largest / batch) if batch else (float(largest), 0.0)


def _limit(obs: Observations, budget: int | None, oom: OomRecord | None) -> tuple[int | None, str]:
    if budget is not None:
        return budget, "--memory-budget"
    if oom is not None and oom.capacity:
        return oom.capacity, oom.capacity_source or "the device's capacity"
    if obs.capacity:
        return obs.capacity, "CUDA device memory" if obs.on_cuda else "the machine's memory"
    return None, "unknown"


def _fixes() -> list[type[MemoryFix]]:
    from pitstop import catalog

    return sorted((c for c in catalog.implementations("D") if issubclass(c, MemoryFix)), key=lambda c: (c.tip, c.__name__))


def _rank_key(r: RankedFix) -> tuple:
    cost = r.estimate.time_cost
    if cost is not None and cost <= 0:
        return (0, -r.saves)
    if cost is not None:
        return (1, -r.saves / cost)
    return (2, -r.saves)


def assess(obs: Observations, oom: OomRecord | None, *, budget: int | None = None,
           margin: float = DEFAULT_MARGIN) -> MemoryFit | None:
    """What fits (see the module docstring); None when neither a profile nor a failure was measured."""
    basis = basis_of(obs.memory_profile, oom)
    if basis is None:
        return None
    limit, source = _limit(obs, budget, oom)
    need = basis.peak(basis.batch)
    notes = []
    if basis.room != (0.0, 0.0):
        room = basis.need(basis.batch) - need
        notes.append(f"room kept for the CUDA allocator: {mib(room)} at this batch, one more of the step's largest "
                     "allocation (freed pieces can all be smaller: fragmentation); "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow one segment instead")
    if basis.source == "failure":
        notes.append("from the moment of the failure: the step had not reached its peak, so the need is a lower "
                     "bound and the batches below are upper bounds; run the doctor at the suggested batch to measure")
    m = obs.memory
    if m is not None and m.growth_per_step and m.growth_per_step > 0.01 * max(need, 1) and basis.source == "failure":
        notes.append(f"memory in use grew {mib(m.growth_per_step)} per step before the failure: something keeps "
                     "tensors across steps (PIT202), which no batch size fixes")
    ranked = []
    for cls in _fixes():
        try:
            estimates = list(cls().estimate(basis, obs, limit=limit, need=need, oom=oom))
        except Exception as exc:  # a broken estimate must not hide the others
            notes.append(f"{cls.tip} {cls.__name__}: {type(exc).__name__}: {exc}")
            continue
        for e in estimates:
            after = basis.peak(e.batch if e.batch is not None else basis.batch, e)
            saves = int(need - after)
            if saves <= 0:
                continue
            big = largest_batch(basis, limit / (1 + margin), e) if limit is not None else None
            room = basis.need(e.batch if e.batch is not None else basis.batch, e) - after
            ranked.append(RankedFix(estimate=e, saves=saves, peak_after=int(after),
                                    fits=None if limit is None else (after + room) * (1 + margin) <= limit,
                                    largest_batch=big))
    ranked.sort(key=_rank_key)
    fits = None if limit is None else (basis.need(basis.batch) * (1 + margin) <= limit and oom is None)
    return MemoryFit(basis=basis, limit=limit, limit_source=source, margin=margin, peak=int(need), fits=fits,
                     shown=oom is not None or budget is not None or fits is False,
                     largest_batch=largest_batch(basis, limit) if limit is not None else None,
                     largest_batch_margin=largest_batch(basis, limit / (1 + margin)) if limit is not None else None,
                     fixes=ranked, notes=notes)
