"""Text of the doctor's memory-at-its-limit sections: the out-of-memory failure and "what fits".

Reads the typed records (:class:`~pitstop.doctor.analysis.oom_records.OomRecord`,
:class:`~pitstop.doctor.analysis.fits.MemoryFit`) and decides nothing: what is shown and in
which order was decided by the mechanism (``MemoryFit.shown``, the fixes' ranking).
:func:`oom_lines` and :func:`fit_lines` give plain lines (the terminal and the HTML page use
them); :func:`render_memory` prints them on a rich console.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from pitstop.doctor.analysis.fits import MemoryFit, RankedFix
from pitstop.doctor.analysis.oom_records import MemoryParts, OomRecord
from pitstop.report.terminal import fmt_bytes

__all__ = ["oom_lines", "fit_lines", "parts_line", "fix_line", "render_memory"]

_TOP_MODULES = 5


def parts_line(p: MemoryParts) -> str:
    """``parameters 2.0 MiB | gradients ... | temporaries ...`` (and what the count leaves over)."""
    bits = [f"parameters {fmt_bytes(p.params)}", f"gradients {fmt_bytes(p.grads)}",
            f"optimizer state {fmt_bytes(p.optimizer_state)}", f"activations {fmt_bytes(p.activations)}",
            f"temporaries {fmt_bytes(p.temporaries)}"]
    if p.unattributed is not None:
        bits.append(f"not attributed {fmt_bytes(p.unattributed)}")
    return " | ".join(bits)


def oom_lines(oom: OomRecord) -> list[str]:
    """The failure: where, the error, capacity, what was allocated by category, the allocator,
    the memory trail before a kill, the script's own exit status."""
    out = [f"Out of memory: {oom.where}", f"  {oom.error}: {oom.message}" if oom.message else f"  {oom.error}"]
    cap = []
    if oom.capacity:
        cap.append(f"capacity {fmt_bytes(oom.capacity)} ({oom.capacity_source})")
    if oom.tried:
        cap.append(f"tried to allocate {fmt_bytes(oom.tried)}")
    if oom.free is not None:
        cap.append(f"free {fmt_bytes(oom.free)}")
    if cap:
        out.append("  " + "; ".join(cap))
    p = oom.parts
    if p is not None:
        total = f"allocated {fmt_bytes(p.total)} ({p.total_source})" if p.total is not None else (
            f"tensors alive {fmt_bytes(p.attributed)} ({p.total_source})")
        out += [f"  {total}:", f"    {parts_line(p)}"]
        if p.by_module:
            top = ", ".join(f"{m.module} {fmt_bytes(m.bytes)}" for m in p.by_module[:_TOP_MODULES])
            more = f" (+{len(p.by_module) - _TOP_MODULES} more)" if len(p.by_module) > _TOP_MODULES else ""
            out.append(f"    activations still saved, by module: {top}{more}")
    a = oom.allocator
    if a is not None and a.reserved is not None:
        line = (f"  CUDA allocator: reserved {fmt_bytes(a.reserved)}, allocated {fmt_bytes(a.allocated)}, cached "
                f"{fmt_bytes(a.cached)}, in free pieces of split blocks {fmt_bytes(a.inactive_split)}")
        if a.largest_free is not None:
            line += f", largest free block {fmt_bytes(a.largest_free)}"
        out.append(line)
        if a.top_sites:
            out.append("    most bytes allocated at: " + ", ".join(f"{s.module} {fmt_bytes(s.bytes)}" for s in a.top_sites))
        if a.history != "recorded":
            out.append(f"    allocator history: {a.history}")
    if oom.rss:
        first, last = oom.rss[0], oom.rss[-1]
        out.append(f"  resident memory: {fmt_bytes(first.rss)} {first.seconds:.1f} s before the kill, "
                   f"{fmt_bytes(last.rss)} at the last sample (step {last.step}{', ' + last.phase if last.phase else ''})")
    out += [f"  {e}" for e in oom.evidence]
    if oom.script_exit is not None:
        out.append(f"  the script alone would have exited with status {oom.script_exit}; pitstop doctor reports it as "
                   "the script's failure")
    out += [f"  note: {n}" for n in oom.notes]
    return out


def fix_line(i: int, r: RankedFix) -> list[str]:
    e = r.estimate
    fits = "" if r.fits is None else (", fits" if r.fits else ", still over")
    big = f"; largest batch then {r.largest_batch}" if r.largest_batch is not None else ""
    cost = "faster" if e.time_cost is not None and e.time_cost < 0 else (
        f"+{100 * e.time_cost:.0f}% step time" if e.time_cost is not None else "time cost unknown")
    out = [f"  {i}. {e.code} {e.title}: saves {fmt_bytes(r.saves)} -> peak {fmt_bytes(r.peak_after)}{fits}{big}; "
           f"{cost}",
           f"     {e.how}: {e.basis}"]
    if e.cost_basis:
        out.append(f"     time: {e.cost_basis}")
    out.append(f"     do: {e.fix}" + (f" ({e.caveat})" if e.caveat else ""))
    return out


def fit_lines(fit: MemoryFit) -> list[str]:
    """What fits: the limit, this batch's predicted peak, the largest batch, the ranked fixes."""
    b = fit.basis
    limit = (f"limit {fmt_bytes(fit.limit)} ({fit.limit_source}), margin {fit.margin:.0%}" if fit.limit is not None
             else "limit unknown")
    src = ("the profiled step" if b.source == "profile" else "the moment of the failure")
    top = b.top
    out = [f"What fits ({limit})",
           f"  {b.batch:g} samples per forward need {fmt_bytes(fit.peak)} at the peak"
           + (f" ({top.phase})" if top.phase else "") + f", from {src}: {fmt_bytes(b.fixed)} of parameters, gradients "
           f"and optimizer state + {fmt_bytes(b.per_sample)} per sample of activations and temporaries"
           + (f" ({len(b.moments)} moments of the step could be the peak at other batches)" if len(b.moments) > 1
              else "")]
    if fit.limit is not None:
        exact = fit.largest_batch if fit.largest_batch is not None else "none"
        margin = fit.largest_batch_margin if fit.largest_batch_margin is not None else "none"
        out.append(f"  largest batch that fits: {margin} with the margin ({exact} without)")
    if fit.fixes:
        out.append("  fixes, ranked by memory saved per time lost:")
        for i, r in enumerate(fit.fixes, 1):
            out += fix_line(i, r)
    out += [f"  note: {n}" for n in fit.notes]
    return out


def render_memory(diag: Any, con: Any) -> None:
    """The two sections on a rich console (nothing when neither applies)."""
    oom = diag.result.oom
    if oom is not None:
        lines = oom_lines(oom)
        con.print(Text("\n" + lines[0], style="bold red"))
        for line in lines[1:]:
            con.print(line, markup=False, highlight=False)
    fit = diag.memory_fit
    if fit is not None and fit.shown:
        lines = fit_lines(fit)
        con.print(Text("\n" + lines[0], style="bold"))
        for line in lines[1:]:
            con.print(line, markup=False, highlight=False)
