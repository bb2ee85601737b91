"""Render a :class:`~pitstop.tune.result.TuneResult`: the terminal report (rich) and JSON."""

from __future__ import annotations

from typing import IO, Any

from pitstop.jsoncodec import dumps
from pitstop.paired import Decision
from pitstop.report.terminal import fmt_bytes, make_console
from pitstop.tune.equivalence import LossCheck
from pitstop.tune.result import Trial, TuneResult
from pitstop.tune.run import SetupSplit
from pitstop.tune.sweep import SweepResult

__all__ = ["render_text", "render_json", "VERDICT_TEXT"]

VERDICT_TEXT = {"kept": "KEPT", "no_gain": "no gain", "slower": "slower", "rejected": "REJECTED",
                "failed": "FAILED", "not_applicable": "n/a", "skipped": "skipped"}
_STYLE = {"kept": "bold green", "rejected": "bold red", "failed": "red", "slower": "yellow"}


def render_json(result: TuneResult) -> str:
    return dumps(result.to_dict())


def _speed(sp: Decision | None) -> str:
    if sp is None:
        return "-"
    return f"{sp.ratio:.2f}x [{sp.low:.2f}, {sp.high:.2f}]"


def _loss(lc: LossCheck | None) -> str:
    if lc is None:
        return "-"
    if lc.status == "ok":
        return f"ok ({lc.deviation:.2%})"
    if lc.status == "diverged":
        return f"DIVERGED ({lc.deviation:.1%} > {lc.tolerance:.1%})"
    return lc.status


def _mem(delta: int | None) -> str:
    if delta is None:
        return "-"
    return ("+" if delta > 0 else "") + fmt_bytes(delta)


def _why(result: TuneResult) -> str:
    """Which clocks decided the verdicts (one line)."""
    measures: dict[str, str] = {}
    for t in result.trials:
        if t.speed is not None:
            measures.setdefault(t.speed.measure.name, t.speed.measure.why)
    return "; ".join(f"{why}" for why in measures.values())


def _time(console: Any, result: TuneResult) -> None:
    t, b = result.time, result.budget
    if t is None:
        return
    line = (f"time: {t.total:.0f} s in all: survey {t.survey:.0f} s; {t.runs} runs ({t.worker}): set-up and "
            f"shutdown {t.setup + t.other:.0f} s, warm-up steps {t.warmup:.0f} s, measured steps {t.measured:.0f} s")
    if b is not None and b.seconds:
        line += f"; budget {b.seconds:.0f} s" + (" (exhausted: some runs were skipped)" if b.exhausted else "")
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    for tt in t.trials:
        console.print(f"  {tt.trial}: {tt.runs} run{'s' * (tt.runs != 1)}, {tt.elapsed:.1f} s: set-up {tt.setup:.1f} s"
                      f"{_split(tt.split)}, warm-up {tt.warmup:.1f} s, measured {tt.measured:.1f} s",
                      markup=False, highlight=False, soft_wrap=True)


def _split(sp: SetupSplit | None) -> str:
    if sp is None:
        return ""
    parts = [(name, v) for name, v in (("start", sp.start), ("imports", sp.imports), ("build", sp.build),
                                       ("first step", sp.first_step), ("compile", sp.compile)) if v]
    return f" ({', '.join(f'{n} {v:.1f}' for n, v in parts)})" if parts else ""


def _plan(console: Any, result: TuneResult) -> None:
    """The budget plan made before measuring: the order, each trick's forecast, what will not fit."""
    plan = result.budget.plan if result.budget is not None else None
    if plan is None:
        return
    budget = f"budget {plan.budget:.0f} s" if plan.budget else "no budget"
    console.print(f"[bold]plan (before measuring): {budget}[/bold]; survey {plan.survey_s:.0f} s; one run {plan.run_s:.1f} s "
                  f"(set-up {plan.setup_s:.1f} s) at {plan.steps} measured steps, a pair about {plan.pair_s:.1f} s; "
                  f"planned {plan.planned_s:.0f} s in all", highlight=False, soft_wrap=True)
    if plan.steps_why:
        console.print(f"  steps: {plan.steps_why}", markup=False, highlight=False, soft_wrap=True)
    for n, it in enumerate(plan.items, 1):
        where = {"alone": "", "again on the path": ", again on top of the path", "on the path": ", on top of the path"}[it.stage]
        pairs = f"~{it.pairs} pairs" if it.pairs is not None else "no verdict forecast within its pairs"
        once = f" ({it.one_time_s:.0f} s of them its first run, estimated)" if it.one_time_s else ""
        fate = "fits" if it.fits else f"WILL NOT FIT: {it.why}"
        console.print(f"  {n}. {it.trick}{where}: prior {it.prior.ratio:.2f}x ({it.prior.source}); {pairs}, "
                      f"{it.seconds:.0f} s{once}: {fate}", markup=False, highlight=False, soft_wrap=True)
    if plan.items:
        fate = ("fits" if plan.confirm_fits else "WILL NOT FIT after the tricks that fit: the result's claim will be "
                "the pairs that chose it, said unconfirmed")
        console.print(f"  then the result's confirmation in fresh pairs: {plan.confirm_s:.0f} s: {fate}",
                      markup=False, highlight=False, soft_wrap=True)


def _compile_text(t: Trial) -> str:
    c = t.compile
    later = f"; {c.compile_s_cached:.1f} s in each later run, its cache warm" if c.compile_s_cached is not None else ""
    if t.status == "kept" and c.break_even_steps:
        return f"; compile {c.compile_s:.1f} s once (its first run{later}), pays off after {c.break_even_steps} steps"
    return f"; compile {c.compile_s:.1f} s once (its first run{later})"


def _startup_text(t: Trial) -> str:
    c = t.startup
    pays = f", pays off after {c.break_even_steps} steps" if c.break_even_steps else ""
    return f"; start-up {c.extra_s:.1f} s more warm-up per run than its reference{pays}"


def render_text(result: TuneResult, file: IO[str] | None = None, width: int | None = None) -> None:
    """The terminal report: settings and baseline, the trials table, the combination, the
    best configuration with the code to use it, the sweep, notes and where the time went."""
    console = make_console(file, width=width or 150)
    _header(console, result)
    _plan(console, result)
    console.print(_trials_table(result))
    console.print("steps/s: the baseline's times the paired speed-up (wall-clock rates of single runs are in the JSON)",
                  markup=False, highlight=False)
    if result.combination:
        console.print("[bold]stagewise search[/bold] (the remaining tricks measured again on top of each one added)")
        for step in result.combination:
            sp = step.speed
            iv = f" ({sp.ratio:.2f}x [{sp.low:.2f}, {sp.high:.2f}])" if sp is not None else ""
            console.print(f"  {_STEP_TEXT.get(step.status, step.status):13s} {step.added}{iv}: {step.reason}",
                          markup=False, highlight=False)
    _path(console, result)
    _best(console, result)
    if result.sweep:
        _sweep(console, result.sweep)
    for note in result.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    _time(console, result)


def _header(console: Any, result: TuneResult) -> None:
    sps, samples = result.baseline_steps_per_s, result.baseline_samples_per_s
    opts = result.settings.options
    console.print(f"[bold]pitstop tune[/bold] {result.target}  ({result.mode} mode, {result.device}; "
                  f"{_steps(result)} steps after {opts.warmup} warmup per run; each trial paired with the baseline "
                  f"runs next to it, {max(2, opts.repeats)} to {opts.max_pairs} pairs)")
    console.print(f"baseline: {sps:.2f} steps/s" if sps else "baseline: not measured", end="")
    if samples:
        console.print(f", {samples:.1f} samples/s", end="")
    console.print(f" ({len(result.baseline.runs)} runs; their spread {result.noise:.0%}, already inside each paired interval)"
                  if result.noise is not None else "")
    why = _why(result)
    if why:
        console.print(f"decided on: {why}", markup=False, highlight=False)
    warn = result.script_warnings
    if warn:
        console.print(f"the script wrote {warn.lines} lines to stderr over all runs ({warn.distinct} distinct; "
                      f"first: {warn.first[0][:120]!r})", markup=False, highlight=False)


def _steps(result: TuneResult) -> int:
    plan = result.budget.plan if result.budget is not None else None
    return plan.steps if plan is not None else result.settings.options.steps


def _trials_table(result: TuneResult) -> Any:
    from rich.table import Table

    table = Table(title_justify="left", show_lines=False)
    for col, kw in (("trick", {"no_wrap": True}), ("code", {}), ("steps/s", {"justify": "right"}),
                    ("speed-up [90% CI]", {"justify": "right"}), ("pairs", {"justify": "right"}),
                    ("peak mem", {"justify": "right"}), ("loss check", {}), ("verdict", {}),
                    ("reason", {"overflow": "fold", "ratio": 1})):
        table.add_column(col, **kw)
    for t in result.trials:
        codes = " ".join(dict.fromkeys(s.code for s in t.settings))
        verdict = VERDICT_TEXT.get(t.status, t.status)
        style = _STYLE.get(t.status, "")
        reason = t.reason + (_compile_text(t) if t.compile else "") + (_startup_text(t) if t.startup else "") + (f"; {t.hardware.text()}" if t.hardware else "") + (f"; {t.explanation}" if t.explanation else "")
        sp = t.speed
        table.add_row(t.name, codes, f"{t.steps_per_s:.2f}" if t.steps_per_s else "-", _speed(sp),
                      str(sp.pairs) if sp is not None else "-", _mem(t.memory_change), _loss(t.loss_check),
                      f"[{style}]{verdict}[/]" if style else verdict, reason)
    return table


def _path(console: Any, result: TuneResult) -> None:
    """The path: each stage's trick, its speed-up over the previous stage (interval, clock) and
    the cumulative speed-up over the baseline."""
    if not result.stages:
        return
    console.print("[bold]path[/bold] (each trick measured on top of the stages before it)")
    for st in result.stages:
        sp = st.speed
        over = f"{_speed(sp)} over {'the baseline' if st.index == 1 else f'stage {st.index - 1}'}" if sp else "-"
        clock = f" ({st.clock} time)" if st.clock else ""
        cum = f", {st.cumulative:.2f}x cumulative over the baseline" if st.cumulative else ""
        held = "" if st.in_recipe else " [not in the recipe: the whole path did not hold in fresh pairs]"
        console.print(f"  stage {st.index}: + {st.trick}: {over}{clock}{cum}{held}", markup=False, highlight=False)
    best, last = result.best, result.combination[-1] if result.combination else None
    if best is not None and best.speed is not None and last is not None and last.status == "confirmed":
        console.print(f"  confirmed: {best.name} vs the untouched baseline in fresh pairs: {_speed(best.speed)} "
                      f"({best.speed.measure.name} time)", markup=False, highlight=False)
    elif best is not None and last is not None and last.status == "unconfirmed":
        console.print(f"  unconfirmed: {best.name}: the time budget ran out before fresh pairs against the baseline "
                      "(its claim is the one it was chosen with)", markup=False, highlight=False)


def _best(console: Any, result: TuneResult) -> None:
    """The best configuration and how to use it (framework options, plain PyTorch, the engine)."""
    best = result.best
    if best is None:
        why = ("no trick held in fresh pairs after it was chosen" if result.combination
               else "no trick was faster and loss-equivalent")
        console.print(f"[bold]best: the baseline[/bold]: {why}")
        return
    console.print(f"[bold green]best: {best.name}[/] -> {_speed(best.speed)} vs the baseline "
                  f"({result.best_steps_per_s:.2f} steps/s), loss {_loss(best.loss_check)}")
    cfg = result.framework_config()
    if cfg is not None:
        console.print(f"\n[bold]set it in your {cfg.target.split('.')[-1]}[/bold] ({cfg.framework} detected)")
        console.print(cfg.snippet(), markup=False, highlight=False)
        console.print("[bold]or, in plain PyTorch[/bold]")
    else:
        console.print("\n[bold]paste into your script[/bold]")
    console.print(result.snippet, markup=False, highlight=False)
    from pitstop.tune.knob import recipe_snippet

    console.print("[bold]or train with the engine[/bold] (pitstop.fit; --save-recipe writes it as a file)")
    console.print(recipe_snippet(result.recipe_changed()), markup=False, highlight=False)


_STEP_TEXT = {"added": "added", "no_gain": "not added", "slower": "not added", "rejected": "REJECTED",
              "failed": "FAILED", "skipped": "skipped", "confirmed": "confirmed", "not_confirmed": "not confirmed",
              "unconfirmed": "unconfirmed"}


def _sweep(console: Any, sweep: SweepResult) -> None:
    from rich.table import Table

    cap = sweep.cap
    title = (f"batch-size sweep (memory: {sweep.memory_measure}; cap {fmt_bytes(cap)} = {sweep.cap_source}, "
             f"margin {sweep.margin:.0%})")
    table = Table(title=title, title_justify="left")
    for col in ("batch", "variant", "accumulate", "peak mem", "fits", "samples/s", "note"):
        table.add_column(col)
    for r in sweep.rows:
        table.add_row(str(r.batch_size), r.variant, str(r.accumulate), fmt_bytes(r.peak_memory),
                      {True: "yes", False: "no", None: "-"}[r.fits],
                      f"{r.samples_per_s:.1f}" if r.samples_per_s else "-", r.reason or r.status)
    console.print(table)
    largest = ", ".join(f"{k}: {v if v is not None else 'none'}" for k, v in sweep.largest_fit.items())
    console.print(f"largest batch that fits: {largest}")
    rec = sweep.recommended
    if rec:
        console.print(f"fastest that fits: batch {rec.batch_size} ({rec.variant}, accumulate {rec.accumulate}): "
                      f"{rec.samples_per_s:.1f} samples/s")
    console.print(f"note: {sweep.note}", markup=False, highlight=False)
