"""Work a script does every N steps: evaluation and checkpoints, timed wherever they ran.

A recorder of :class:`~pitstop.doctor.record.instrument.Instrumentation` (full mode). Evaluation
is what the step log marks (:meth:`~pitstop.doctor.record.steps.StepLog.eval_mark`: forwards and
DataLoader waits with gradients off; the Python between them, such as a ``get_batch`` or a
``loss.item()``, counts too: an evaluation's time is the wall span from its first forward to its
last within a step). Checkpoints are ``torch.save`` calls, timed. Both are recorded in every step,
warm-up included: a script that evaluates at step 0 does so inside the doctor's warm-up, where
the observed steps' breakdown never sees it.

The period comes from the source when it can: at an occurrence, the frames of the user's code
on the stack are read for an enclosing ``if`` whose test is ``x % N == 0`` (or ``not x % N``),
and ``N`` is looked up in that frame (a constant, a name, an attribute such as
``args.eval_every``; nothing is called or evaluated). Otherwise the spacing between occurrences
seen gives it, else it is unknown. :func:`periodic_records` amortises each kind over its period.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
import time
from typing import Any

from pitstop.doctor.analysis.records import PeriodicWork
from pitstop.doctor.record.patching import Patches
from pitstop.doctor.record.steps import StepLog
from pitstop.stats import median

__all__ = ["PeriodicRecorder", "guard_of", "periodic_records"]

perf = time.perf_counter
_DOCTOR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _tree(filename: str, cache: dict[str, Any]) -> ast.AST | None:
    if filename not in cache:
        try:
            cache[filename] = ast.parse("".join(linecache.getlines(filename)) or "\n")
        except (SyntaxError, ValueError):
            cache[filename] = None
    return cache[filename]


def _modulo(test: ast.AST) -> ast.AST | None:
    """The divisor ``N`` of a ``x % N == 0`` / ``0 == x % N`` / ``not x % N`` test, or inside an
    ``and``/``or`` of them."""
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            found = _modulo(v)
            if found is not None:
                return found
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        return inner.right if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Mod) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        for a, b in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
            if isinstance(a, ast.BinOp) and isinstance(a.op, ast.Mod) and isinstance(b, ast.Constant) and b.value == 0:
                return a.right
    return None


def _value(node: ast.AST, frame) -> Any:
    """A constant, a name or an attribute chain looked up in ``frame``; None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return scope[node.id]
        return None
    if isinstance(node, ast.Attribute):
        base = _value(node.value, frame)
        return None if base is None else getattr(base, node.attr, None)
    return None


def _guards(tree: ast.AST, line: int) -> list[ast.If]:
    """The ``if`` statements whose body holds ``line``, innermost first."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body and node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0):
            out.append(node)
    return sorted(out, key=lambda n: -n.lineno)


def guard_of(frame, is_user, cache: dict[str, Any]) -> tuple[int, str] | None:
    """``(N, "the guard `test` at file:line, N = value")`` for the first ``if x % N == 0`` that
    encloses a frame of the user's code (``is_user(filename)``) on the stack ending at
    ``frame``; None when there is none or ``N`` is not a positive int here."""
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if is_user(fn):
            tree = _tree(fn, cache)
            for node in _guards(tree, f.f_lineno) if tree is not None else ():
                divisor = _modulo(node.test)
                value = _value(divisor, f) if divisor is not None else None
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    expr = ast.unparse(divisor)
                    said = "" if isinstance(divisor, ast.Constant) else f", {expr} = {value}"
                    return value, f"the guard `{ast.unparse(node.test)}` at {_short(f'{fn}:{node.lineno}')}{said}"
        f = f.f_back
    return None


class PeriodicRecorder:
    """Where each step's evaluation ran, and every ``torch.save``; see the module docstring."""

    def __init__(self, log: StepLog, sites: Any) -> None:
        self.log, self.sites = log, sites
        #: record index -> (where, via, guard) of the evaluation that ran in that step
        self.eval_where: dict[int, tuple[str | None, str | None, tuple[int, str] | None]] = {}
        #: (record index, kind, seconds, where, via, guard) of every torch.save
        self.saves: list[tuple[int, str, float, str | None, str | None, tuple[int, str] | None]] = []
        self._asts: dict[str, Any] = {}
        self._guards: dict[str, tuple[int, str] | None] = {}
        self._orig_save: Any = None
        log.on_eval = self._eval_started

    def install(self, patches: Patches) -> None:
        import torch

        self._orig_save = patches.set(torch, "save", self._save)

    def _locate(self, frame) -> tuple[str | None, str | None, tuple[int, str] | None]:
        found = self.sites.site(frame)
        where, via = found if found is not None else (None, None)
        key = via or where
        if key not in self._guards:  # read once per line of the user's (the value of N too)
            self._guards[key] = guard_of(frame, self.sites.is_user, self._asts)
        return where, via, self._guards[key]

    def _eval_started(self) -> None:
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_DOCTOR_DIR):  # the doctor's hooks
            f = f.f_back
        self.eval_where[self.log.index] = self._locate(f)

    def _save(self, *args: Any, **kwargs: Any) -> Any:
        if self.log.passive:
            return self._orig_save(*args, **kwargs)
        t0 = perf()
        try:
            return self._orig_save(*args, **kwargs)
        finally:
            seconds = perf() - t0
            self.saves.append((self.log.index, self.log.kind() or "extra", seconds, *self._locate(sys._getframe(1))))


def _spacing(steps: list[int]) -> int | None:
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    return gaps.pop() if len(gaps) == 1 and steps and min(gaps or {0}) > 0 else None


def _work(kind: str, runs: list[tuple[int, str, float, str | None, str | None, tuple[int, str] | None]],
          train_step: float | None) -> PeriodicWork:
    steps = [r[0] for r in runs]
    guard = next((r[5] for r in runs if r[5] is not None), None)
    spaced = _spacing(sorted(set(steps)))
    if guard is not None:
        period, how = guard
    elif spaced is not None:
        period, how = spaced, f"seen every {spaced} steps"
    else:
        period, how = None, None
    seconds = median([r[2] for r in runs]) or 0.0
    per_step = seconds / period if period else None
    first = runs[0]
    return PeriodicWork(kind=kind, where=first[3], via=first[4], seconds=seconds, occurrences=len(runs), steps=steps,
                        in_warmup=sum(r[1] == "warmup" for r in runs), in_observed=sum(r[1] == "observed" for r in runs),
                        period=period, period_how=how, per_step=per_step,
                        share=per_step / train_step if per_step is not None and train_step else None)


def periodic_records(rec: PeriodicRecorder, log: StepLog, train_step: float | None) -> list[PeriodicWork]:
    """Evaluation and checkpoints of the run, each amortised over its period (``train_step``:
    the training step's seconds, its own evaluation excluded)."""
    out = []
    evals = [(i, kind, span, *rec.eval_where.get(i, (None, None, None))) for i, kind, span, _ in log.evals
             if kind in ("warmup", "observed")]
    if evals:
        out.append(_work("eval", evals, train_step))
    saves = [s for s in rec.saves if s[1] in ("warmup", "observed")]
    if saves:
        out.append(_work("checkpoint", saves, train_step))
    return out


def _short(where: str | None) -> str:
    if not where:
        return "?"
    path, _, line = where.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
