"""The two entry points: :func:`tune` (API mode, engine users) and :func:`tune_script`
(script mode, ``pitstop tune train.py``). Both run :func:`pitstop.tune.protocol.search`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pitstop.tune.knob import Knob, all_knobs
from pitstop.tune.progress import NullProgress
from pitstop.tune.result import TuneResult
from pitstop.tune.search_info import BudgetUse
from pitstop.tune.options import Budget, TuneOptions
from pitstop.tune.protocol import search

__all__ = ["tune", "tune_script"]


def tune(model: Any, optimizer_factory: Callable[[Iterable[Any]], Any], loss_fn: Callable[[Any, Any], Any],
         loader: Iterable, *, steps: int = 10, warmup: int = 3, repeats: int = 3, budget: float | None = None,
         only: Sequence[str] = (), recipe: Any = None, seed: int = 0, timeout: float = 300.0,
         margin: float | None = None, confidence: float | None = None, sweep: bool = True,
         batch_sizes: Sequence[int] | None = None, max_batch: int | None = None, memory_cap: int | str | None = None,
         memory_margin: float | None = None, effective_batch: int | None = None, progress: bool | None = False,
         knobs: Sequence[Knob] | None = None, threads: int | None = None, max_pairs: int = 8,
         try_values: Sequence[str] = ()) -> TuneResult:
    """A/B-measure the registered knobs on an engine training and return a :class:`TuneResult`.

    ``loss_fn(model, batch)`` returns the scalar loss, as for :func:`pitstop.make_step`;
    ``optimizer_factory(params)`` builds the optimizer (called once per run, so every run
    starts from an empty optimizer state); ``recipe`` is the starting point (default:
    ``Recipe()``). Knobs (``only=``: tip codes or knob names) are tried with
    ``warmup + steps`` optimizer steps per run; each trial run next to a baseline run
    (a *pair*); ``repeats`` pairs at least before a verdict, ``max_pairs`` at most.

    ``sweep=True`` also runs the batch-size sweep: ``batch_sizes`` (default: the loader's
    batch size doubled up to ``max_batch``, default 8x), with and without activation
    checkpointing; ``memory_cap`` (bytes or ``"4GiB"``; default: CUDA memory, or half the
    available RAM on CPU) and ``memory_margin`` (default 0.10) decide what fits;
    ``effective_batch`` keeps the effective batch via accumulation.

    ``threads``: ``torch.set_num_threads`` for the duration of the search (restored after).
    ``try_values`` ("KNOB=VALUE", e.g. ``"autocast=fp16"``): values tried even where their knob
    does not choose them by default (:attr:`TuneOptions.try_values`).

    ``result.recipe()`` is the winning :class:`pitstop.Recipe` for :func:`pitstop.fit`.
    """
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        torch.set_num_threads(threads)
    try:
        result = _tune(model, optimizer_factory, loss_fn, loader, steps=steps, warmup=warmup, repeats=repeats,
                       budget=budget, only=only, recipe=recipe, seed=seed, timeout=timeout, margin=margin,
                       confidence=confidence, sweep=sweep, batch_sizes=batch_sizes, max_batch=max_batch,
                       memory_cap=memory_cap, memory_margin=memory_margin, effective_batch=effective_batch,
                       progress=progress, knobs=knobs, max_pairs=max_pairs, try_values=try_values)
    finally:
        torch.set_num_threads(previous)
    result.settings.threads = threads
    return result


def _tune(model, optimizer_factory, loss_fn, loader, *, steps, warmup, repeats, budget, only, recipe, seed, timeout,
          margin, confidence, sweep, batch_sizes, max_batch, memory_cap, memory_margin, effective_batch, progress,
          knobs, max_pairs, try_values) -> TuneResult:
    from pitstop.tune.inprocess import ApiBackend
    from pitstop.tune.peak import parse_bytes
    from pitstop.tune.progress import make_progress
    from pitstop.tune.sweep import DEFAULT_MEMORY_MARGIN, batch_size_sweep
    from pitstop.tune.verdict import DEFAULT_CONFIDENCE, DEFAULT_MARGIN

    options = TuneOptions(steps=steps, warmup=warmup, repeats=repeats, budget=budget, timeout=timeout,
                          margin=DEFAULT_MARGIN if margin is None else margin,
                          confidence=DEFAULT_CONFIDENCE if confidence is None else confidence, only=tuple(only), seed=seed,
                          max_pairs=max_pairs, try_values=tuple(try_values))
    cap = parse_bytes(memory_cap) if memory_cap is not None else None
    if effective_batch is not None and (not isinstance(effective_batch, int) or effective_batch < 1):
        raise ValueError(f"effective_batch must be a positive int, got {effective_batch!r}")
    knob_list = list(knobs) if knobs is not None else all_knobs()
    backend = ApiBackend(model, optimizer_factory, loss_fn, loader, recipe=recipe, seed=seed)
    bar = make_progress(progress) if progress is not False else NullProgress()
    ctx = backend.context()
    started = Budget(budget)
    result = search(backend, knob_list, options, progress=bar, context=ctx)
    if sweep:
        left = None if budget is None else max(0.0, budget - started.spent)
        with bar:
            result.sweep = batch_size_sweep(
                backend, ctx, knob_list, budget=Budget(left) if left is not None else Budget(None), steps=steps,
                warmup=warmup, timeout=timeout, batch_sizes=batch_sizes, max_batch=max_batch, memory_cap=cap,
                memory_margin=DEFAULT_MEMORY_MARGIN if memory_margin is None else memory_margin,
                effective_batch=effective_batch, progress=bar)
        result.budget = BudgetUse(**started.to_dict(), plan=result.budget.plan if result.budget is not None else None)
    return result


def tune_script(script: str | None = None, module: str | None = None, args: Sequence[str] = (), *,
                steps: int | None = None,
                warmup: int = 3, repeats: int = 3, budget: float | None = None, only: Sequence[str] = (),
                timeout: float = 300.0, margin: float | None = None, confidence: float | None = None, seed: int = 0,
                progress: bool | None = False, knobs: Sequence[Knob] | None = None, cwd: str | None = None,
                survey_steps: int | None = None, threads: int | None = None, max_pairs: int = 8, warm: bool = True,
                nproc_per_node: int | None = None, try_values: Sequence[str] = (), worker: Any = None,
                bench: Sequence[Any] = ()) -> TuneResult:
    """Script mode: tune an unmodified training script (``script`` path or ``module`` name,
    ``args`` its own arguments). Each run is a fresh child process under the doctor's bootstrap;
    with ``nproc_per_node`` each run is a whole torchrun job of that many ranks
    (:class:`pitstop.tune.job.JobBackend`: the slowest rank's step time, every rank's loss checked).
    ``try_values`` ("KNOB=VALUE", e.g. ``"autocast=fp16"``): values to try even where their knob
    does not choose them by default (:attr:`TuneOptions.try_values`). ``worker``: a started
    :class:`pitstop.tune.warm.WarmRunner` to fork the runs from, owned by the caller and left open
    (searches of several scripts in one process import torch once; without it each search starts
    its own warm worker, or fresh processes with ``warm=False``). ``steps``: measured steps per
    run; None (default): 10, more where the survey's run spent longer on its set-up than on its
    steps (:attr:`TuneOptions.more_steps`). ``bench``: :class:`pitstop.tune.options.BenchPrior`
    ratios measured on this machine, the scheduler's priors."""
    from pitstop.tune.progress import make_progress
    from pitstop.tune.script import SURVEY_STEPS, ScriptBackend
    from pitstop.tune.verdict import DEFAULT_CONFIDENCE, DEFAULT_MARGIN

    options = TuneOptions(steps=10 if steps is None else steps, warmup=warmup, repeats=repeats, budget=budget,
                          timeout=timeout, margin=DEFAULT_MARGIN if margin is None else margin,
                          confidence=DEFAULT_CONFIDENCE if confidence is None else confidence, only=tuple(only), seed=seed,
                          max_pairs=max_pairs, try_values=tuple(try_values), more_steps=steps is None,
                          bench=tuple(bench))
    kw = dict(script=script, module=module, args=tuple(args), seed=seed, cwd=cwd,
              survey_steps=SURVEY_STEPS if survey_steps is None else survey_steps, timeout=timeout, threads=threads)
    if nproc_per_node is not None:
        from pitstop.tune.job import JobBackend

        backend: ScriptBackend = JobBackend(**kw, nproc_per_node=nproc_per_node)
    else:
        backend = ScriptBackend(**kw, warm=warm, worker=worker)
    knob_list = list(knobs) if knobs is not None else all_knobs()
    bar = make_progress(progress) if progress is not False else NullProgress()
    try:
        result = search(backend, knob_list, options, progress=bar)
    finally:
        backend.close()
    result.settings.threads = threads
    result.settings.omp_wait_policy = "PASSIVE" if backend.passive_omp else None
    return result
