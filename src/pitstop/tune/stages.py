"""The path of a stagewise search: its stages, and which candidates a stage measures, in which
order (torch-free).

A *stage* is one trick added on top of the previous stage (stage 1 on top of the baseline);
its speed-up is measured against the previous stage (paired), its loss checked against the
original baseline, and its cumulative speed-up over the baseline is the product of the stages'
ratios (the final confirmation measures the whole path against the untouched baseline).

Which candidates a stage measures (:func:`retry_reason`): a trick that was not faster alone
(``slower`` / ``no_gain`` against the baseline) is measured again on top of the path when the
path may have moved the bottleneck towards the phases it shortens. The knobs say which step
phases a value can shorten (:meth:`pitstop.tune.knob.Knob.phases`; empty: any); the path's
tricks shortened theirs. A candidate whose phases all lie among the phases the path already
shortened cannot gain from the move (they only shrank): it is skipped with that reason. Where
the survey measured the phases' shares (the doctor's breakdown: DataLoader waits, host work,
forward, backward, optimizer), the shares the path leaves (:func:`shares_after`) order the
candidates, the one whose phases now take most of the step first, and a candidate whose phases
could not reach the bar even if they vanished is skipped (Amdahl, as for the single tricks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pitstop.paired import Decision
from pitstop.tune.knob import Context, Setting

__all__ = ["Stage", "shares_after", "retry_reason", "evidence_order"]


@dataclass(frozen=True)
class Stage:
    """One stage of the path: ``trick`` added on top of the previous stage (the path is
    ``settings``); ``speed`` vs the previous stage (:class:`pitstop.paired.Decision`, with its
    interval and the clock it was decided on), ``cumulative`` the product of the stages' ratios
    up to this one (over the baseline); ``in_recipe``: the final confirmation kept it (a path
    that does not hold against the baseline falls back to its first stage)."""

    index: int
    trick: str
    settings: tuple[Setting, ...]
    speed: Decision | None
    cumulative: float | None
    reason: str
    in_recipe: bool = True

    @property
    def clock(self) -> str | None:
        return self.speed.measure.name if self.speed is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.index, "trick": self.trick, "knobs": [s.to_dict() for s in self.settings],
                "speedup_vs_previous": self.speed.to_dict() if self.speed is not None else None,
                "cumulative": self.cumulative, "clock": self.clock, "reason": self.reason,
                "in_recipe": self.in_recipe}


def _path_phases(path: Sequence[Setting], phases: Callable[[Setting], tuple[str, ...]]) -> set[str] | None:
    """The phases the path's tricks shorten; None when one of them may change any phase."""
    out: set[str] = set()
    for s in path:
        ph = phases(s)
        if not ph:
            return None
        out.update(ph)
    return out


def shares_after(ctx: Context | None, touched: set[str] | None, cumulative: float) -> dict[str, float] | None:
    """Estimated share of each surveyed phase once the path runs: the path removed
    ``1 - 1 / cumulative`` of the baseline step from the phases it shortens (``touched``), the
    other phases kept their time; None when the survey has no shares or the path may have
    changed any phase."""
    if ctx is None or not ctx.phase_shares or touched is None or cumulative <= 0:
        return None
    shares = dict(ctx.phase_shares)
    saved = max(0.0, 1.0 - 1.0 / cumulative)
    in_path = sum(v for k, v in shares.items() if k in touched)
    scale = max(0.0, in_path - saved) / in_path if in_path > 0 else 1.0
    step = sum(v * (scale if k in touched else 1.0) for k, v in shares.items())
    if step <= 0:
        return None
    return {k: v * (scale if k in touched else 1.0) / step for k, v in shares.items()}


def retry_reason(cand_phases: tuple[str, ...], path: Sequence[Setting],
                 phases: Callable[[Setting], tuple[str, ...]], shares: dict[str, float] | None, *,
                 bar: float, safety: float) -> str | None:
    """Why a trick that was not faster alone cannot help on top of ``path`` (None: measure it)."""
    touched = _path_phases(path, phases)
    if cand_phases and touched is not None and set(cand_phases) <= touched:
        return (f"its phases ({', '.join(cand_phases)}) are among those the path already shortened: "
                "the bottleneck did not move towards them")
    if cand_phases and shares is not None:
        share = sum(shares.get(p, 0.0) for p in cand_phases)
        best = 1 / max(1e-9, 1 - min(0.999, safety * share))
        if best < bar:
            return (f"{' + '.join(cand_phases)} about {share:.1%} of the step once the path runs (survey shares, "
                    f"scaled by the path's speed-up): even {safety:g}x that, removed entirely, gives at most "
                    f"{best:.3f}x, under the {bar:.2f}x bar")
    return None


def evidence_order(cands: Sequence[Any], cand_phases: Callable[[Any], tuple[str, ...]],
                   shares: dict[str, float] | None) -> list[Any]:
    """``cands`` with the one whose phases take most of the step (once the path runs) first;
    a candidate that may change any phase counts as the whole step; stable otherwise."""
    if shares is None:
        return list(cands)

    def weight(c: Any) -> float:
        ph = cand_phases(c)
        return 1.0 if not ph else sum(shares.get(p, 0.0) for p in ph)

    return sorted(cands, key=lambda c: -weight(c))
