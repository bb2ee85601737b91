"""Text of the memory-budget search (:class:`pitstop.tune.memfit.search.BudgetFit`): a table and the choice."""

from __future__ import annotations

from typing import IO

from rich.table import Table
from rich.text import Text

from pitstop.report.terminal import fmt_bytes, make_console
from pitstop.tune.memfit.search import BudgetFit

__all__ = ["render_budget"]


def render_budget(fit: BudgetFit, file: IO[str] | None = None) -> None:
    con = make_console(file)
    con.print(Text(f"pitstop tune: memory budget {fmt_bytes(fit.budget)} (margin {fit.margin:.0%}), effective batch "
                   f"{fit.effective_batch}; memory: {fit.memory_measure}", style="bold"))
    table = Table(title_justify="left")
    for col in ("variant", "micro-batches", "peak", "fits", "samples/s", "loss", "note"):
        table.add_column(col, overflow="fold")
    for r in fit.rows:
        loss = (r.loss or {}).get("status", "")
        table.add_row(r.variant, f"{r.accumulate} x {r.micro_batch}", fmt_bytes(r.peak) if r.peak is not None else "-",
                      {True: "yes", False: "no", None: "-"}[r.fits], f"{r.samples_per_s:.1f}" if r.samples_per_s else "-",
                      loss, r.reason)
    con.print(table)
    c = fit.chosen
    if c is None:
        con.print(Text("nothing fits the budget and trains the same: see the rows above", style="bold red"))
    else:
        fields = ", ".join(f"{k}={v!r}" for k, v in (c.recipe or {}).items())
        con.print(Text(f"cheapest that fits: {c.variant}, {c.accumulate} x {c.micro_batch}, peak {fmt_bytes(c.peak)}, "
                       f"{c.samples_per_s:.1f} samples/s" + (f"; Recipe({fields})" if fields else ""), style="bold green"))
        if c.reason:
            con.print(c.reason)
    con.print(f"losses checked against: {fit.reference}. {fit.note}")
