"""The compile recorder: what TorchDynamo reports while the user's script runs compiled code.

Armed on the script's first ``torch.compile(...)`` / ``nn.Module.compile()`` call (or at once
when ``torch._dynamo`` is already imported); nothing is imported or changed for a script that
compiles nothing. Interfaces, most supported first (details and versions: ``docs/compile.md``):

- ``torch._logging.set_logs(graph_breaks=True, recompiles=True)`` (public, torch >= 2.1) turns
  on dynamo's two log artifacts; a filter on their loggers (``<module>.__graph_breaks`` /
  ``.__recompiles``, found by that documented naming) reads each record and stops it, so the
  user's stderr stays as it was. When the user set ``TORCH_LOGS`` the doctor leaves the log
  configuration alone, reads what is enabled and lets every record through.
- dynamo's recompile-limit warning (logger ``torch._dynamo.convert_frame``, always on):
  which function went eager and why.
- ``torch._dynamo.callback.callback_handler`` start/end callbacks (torch >= 2.3): the wall time
  of each compilation (dynamo frames and lazy backward graphs), tagged with the doctor's step.
- ``torch._dynamo.utils.counters`` (``graph_break``, ``stats.unique_graphs``): the graph count,
  and the break count when the log artifacts could not be read.

Breaks are attributed to the innermost frame outside torch and pitstop; a break whose frames
are all pitstop's (the doctor's own patched ``Tensor.item`` run by dynamo after the user's
break) is not the user's and is not counted.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any

from pitstop.doctor.analysis.compile_records import CompileRecord, GraphBreak, LimitHit, Recompile

__all__ = ["CompileWatch", "parse_graph_break", "parse_recompile", "parse_limit_hit"]

_PITSTOP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\s*$')
_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)")
_GENERIC = ("Encountered graph break when attempting to trace", "Graph break in user code",
            "Graph Break Reason:", "Graph break (user stack suppressed")
_RECOMPILING = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<file>.+?):(?P<line>\d+)")
_FAILURE = re.compile(r"^\s*-\s*(?:\d+/\d+:\s*)?(?P<guard>.+?)\s*$")
_LIMIT = re.compile(r"hit config\.(?P<name>\w+) \((?P<value>\d+)\)")
_LIMIT_FN = re.compile(r"function: '(?P<fn>[^']+)' \((?P<file>.+?):(?P<line>\d+)\)")
_LIMIT_REASON = re.compile(r"last reason: (?P<reason>.+)")
_NUMBER = re.compile(r"==\s*-?\d+(?:\.\d+)?(?:e-?\d+)?$")
_VALUES = re.compile(r"\.?\s*expected [^,]+, actual .+$")


def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _users(file: str, torch_dir: str) -> bool:
    return not (file.startswith(torch_dir) or file.startswith(_PITSTOP_DIR) or file.startswith("<"))


def parse_graph_break(text: str, torch_dir: str) -> GraphBreak | None:
    """A graph-break log message -> the user's break; None when it is none of the user's
    (every frame is torch's or pitstop's)."""
    lines = text.splitlines()
    reason = ""
    older = re.search(r"Graph break: (.+?) from user code", text)  # torch <= 2.5 wording
    if older:
        reason = older.group(1).strip()
    tail = text.split("Graph Break Reason:", 1)[1] if "Graph Break Reason:" in text else ""
    for ln in tail.splitlines() if not reason else ():
        s = ln.strip()
        if s.startswith("User code traceback") or s.startswith("File "):
            break
        if s and not s.startswith(_GENERIC):
            reason = s
            break
    if not reason:
        reason = lines[0].strip() if lines else "graph break"
    frames = []
    for i, ln in enumerate(lines):
        m = _FRAME.match(ln)
        if m:
            src = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else None
            frames.append((m["file"], int(m["line"]), m["fn"], src or None))
    outside = [f for f in frames if not f[0].startswith(torch_dir)]
    if outside and outside[-1][0].startswith(_PITSTOP_DIR):
        return None  # the innermost frame is the doctor's own (its patched Tensor.item run by dynamo)
    user = [f for f in frames if _users(f[0], torch_dir)]
    if user:
        file, line, fn, src = user[-1]
        return GraphBreak(reason=reason, where=f"{file}:{line}", function=fn, source=src)
    m = _AT.search(text)
    if m and _users(m["file"], torch_dir):
        return GraphBreak(reason=reason, where=f"{m['file']}:{m['line']}")
    if frames or m:
        return None  # the doctor's own frames (or torch's): not the user's break
    return GraphBreak(reason=reason)


def parse_recompile(text: str) -> tuple[str, str | None, str] | None:
    """A recompile log message -> (function, "file:line", the first failing guard)."""
    m = _RECOMPILING.search(text)
    if not m:
        return None
    guard = None
    after = text.split("guard failure(s):", 1)[1] if "guard failure(s):" in text else ""
    for ln in after.splitlines():
        g = _FAILURE.match(ln)
        if g:
            guard = g["guard"]
            break
    if m["file"].startswith(_PITSTOP_DIR):
        return None  # a doctor hook run by dynamo as a frame of its own: not the user's code
    guard = re.sub(r"\s+#.*$", "", guard) if guard else "unknown guard"
    return m["fn"], f"{m['file']}:{m['line']}", guard


def parse_limit_hit(text: str) -> LimitHit | None:
    m = _LIMIT.search(text)
    if not m:
        return None
    fn = _LIMIT_FN.search(text)
    reason = _LIMIT_REASON.search(text)
    return LimitHit(function=fn["fn"] if fn else "?", where=f"{fn['file']}:{fn['line']}" if fn else None,
                    limit_name=m["name"], limit=int(m["value"]),
                    last_reason=re.sub(r"^\d+/\d+:\s*", "", reason["reason"].strip()) if reason else None)


class _Capture(logging.Filter):
    """A logger filter: hands each record to ``on`` and keeps it only when ``keep``."""

    def __init__(self, on: Any, keep: bool) -> None:
        super().__init__()
        self.on, self.keep = on, keep

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            self.on(record.getMessage())
        except Exception:  # a message the parser does not know: never break the user's run
            pass
        return self.keep


class CompileWatch:
    """See the module docstring. ``step_kind`` returns the doctor's current step kind;
    ``on_arm()`` runs when the watch arms, ``on_use()`` once the script compiles (it called
    ``torch.compile`` / ``Module.compile``, or dynamo compiled a frame);
    ``on_function(compiled, fn)`` may wrap what ``torch.compile(fn)`` returns for a function
    (not a module), so that its calls are seen at its boundary."""

    def __init__(self, step_kind: Any = lambda: None, on_arm: Any = None, on_use: Any = None,
                 on_function: Any = None) -> None:
        self.step_kind, self.on_arm, self.on_use, self.on_function = step_kind, on_arm, on_use, on_function
        self.armed = False
        self.used = False  # the script called torch.compile / Module.compile
        self.static = False  # ... with dynamic=False
        self.logs = False  # the graph_breaks/recompiles artifacts are read
        self._breaks: dict[tuple, GraphBreak] = {}
        self._recompiles: dict[tuple, Recompile] = {}
        self._limits: list[LimitHit] = []
        self.compilations = 0
        self.compile_s = 0.0
        self.compile_s_observed = 0.0
        self._t0: tuple[float, str | None] | None = None
        self._undo: list[Any] = []
        self._torch_dir = ""

    @property
    def compiles(self) -> bool:
        """The script compiled something (called torch.compile, or dynamo compiled a frame)."""
        return self.used or self.compilations > 0

    # -- install ------------------------------------------------------------------------
    def install(self, patches: Any) -> None:
        import torch

        watch = self

        def compile_(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            watch.static = watch.static or kwargs.get("dynamic") is False
            watch.mark_used()
            fn = args[0] if args else kwargs.get("model")
            if watch.on_function is not None and fn is not None and out is not fn and not kwargs.get("disable") \
                    and not isinstance(fn, torch.nn.Module) and callable(out):
                out = watch.on_function(out, fn)  # a compiled function (torch.compile(fn), @torch.compile)
            return out

        def module_compile(module: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_method(module, *args, **kwargs)
            watch.static = watch.static or kwargs.get("dynamic") is False
            watch.mark_used()
            return out

        original = patches.set(torch, "compile", compile_)
        original_method = patches.set(torch.nn.Module, "compile", module_compile)
        if "torch._dynamo" in sys.modules:
            self.arm()

    def mark_used(self) -> None:
        """The script compiles (``on_use`` runs once)."""
        first = not self.used
        self.used = True
        self.arm()
        if first and self.on_use is not None:
            self.on_use()

    def arm(self) -> None:
        if self.armed:
            return
        self.armed = True
        import torch

        if self.on_arm is not None:
            self.on_arm()
        self._torch_dir = _torch_dir()
        user_logs = bool(os.environ.get("TORCH_LOGS"))
        if not user_logs:
            try:
                torch._logging.set_logs(graph_breaks=True, recompiles=True)
                self._undo.append(lambda: torch._logging.set_logs())
            except Exception:
                pass
        found = 0
        for name, lg in list(logging.root.manager.loggerDict.items()):
            if not (isinstance(lg, logging.Logger) and name.startswith("torch.")):
                continue
            if name.endswith(".__graph_breaks"):
                found += self._filter(lg, self._on_break, keep=user_logs)
            elif name.endswith(".__recompiles"):
                found += self._filter(lg, self._on_recompile, keep=user_logs)
        self.logs = found > 0
        self._filter(logging.getLogger("torch._dynamo.convert_frame"), self._on_warning, keep=True)
        try:
            from torch._dynamo.callback import callback_handler

            callback_handler.register_start_callback(self._start)
            callback_handler.register_end_callback(self._end)
            self._undo.append(lambda: (callback_handler.remove_start_callback(self._start),
                                       callback_handler.remove_end_callback(self._end)))
        except (ImportError, AttributeError):
            pass

    def _filter(self, lg: logging.Logger, on: Any, *, keep: bool) -> int:
        f = _Capture(on, keep)
        lg.addFilter(f)
        self._undo.append(lambda: lg.removeFilter(f))
        return 1

    def uninstall(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass

    # -- events ------------------------------------------------------------------------------
    def _start(self, *args: Any) -> None:
        if not self.used:  # a frame compiled before the script's torch.compile was seen (API mode)
            self.mark_used()
        if self._t0 is None:
            self._t0 = (time.perf_counter(), self.step_kind())

    def _end(self, *args: Any) -> None:
        if self._t0 is None:
            return
        t0, kind = self._t0
        self._t0 = None
        dt = time.perf_counter() - t0
        self.compilations += 1
        self.compile_s += dt
        if kind == "observed" or self.step_kind() == "observed":
            self.compile_s_observed += dt

    def _on_break(self, text: str) -> None:
        brk = parse_graph_break(text, self._torch_dir)
        if brk is None:
            return
        key = (brk.where, brk.reason)
        old = self._breaks.get(key)
        if old is None:
            self._breaks[key] = GraphBreak(reason=brk.reason, where=brk.where, function=brk.function,
                                           source=brk.source, reports=1, step_kind=self.step_kind())
        else:
            self._breaks[key] = GraphBreak(reason=old.reason, where=old.where, function=old.function or brk.function,
                                           source=old.source or brk.source, reports=old.reports + 1,
                                           step_kind=old.step_kind)

    def _on_recompile(self, text: str) -> None:
        parsed = parse_recompile(text)
        if parsed is None:
            return
        fn, where, example = parsed
        guard = _NUMBER.sub("== <value>", _VALUES.sub("", example).strip())
        key = (fn, where, guard)
        old = self._recompiles.get(key)
        self._recompiles[key] = Recompile(function=fn, where=where, guard=guard, example=example,
                                          count=(old.count + 1) if old else 1)

    def _on_warning(self, text: str) -> None:
        hit = parse_limit_hit(text)
        if hit is not None:
            self._limits.append(hit)

    # -- the record ------------------------------------------------------------------------------
    def record(self, compiled_models: bool, calls: int) -> CompileRecord:
        compiled = compiled_models or self.used or self.compilations > 0
        if not compiled:
            return CompileRecord()
        graphs, counted = None, None
        if "torch._dynamo" in sys.modules:
            try:
                from torch._dynamo.utils import counters

                graphs = int(counters["stats"].get("unique_graphs", 0)) or None
                counted = int(sum(counters["graph_break"].values()))
            except Exception:
                pass
        breaks = sorted(self._breaks.values(), key=lambda b: -b.reports)
        how = ("torch._logging artifacts graph_breaks/recompiles" + (" (TORCH_LOGS of the user)" if os.environ.get("TORCH_LOGS") else "")
               if self.logs else "torch._dynamo.utils.counters (no log artifacts found)")
        return CompileRecord(
            compiled=True, graph_breaks=len(breaks) if self.logs else counted, breaks=breaks,
            recompiles=sorted(self._recompiles.values(), key=lambda r: -r.count), limit_hits=list(self._limits),
            compilations=self.compilations, compile_s=self.compile_s, compile_s_observed=self.compile_s_observed,
            graphs=graphs, calls=calls, static=self.static, source=how)
