"""PIT608 graph-breaks: a compiled forward split into pieces by code dynamo cannot trace."""

from __future__ import annotations

from pitstop.catalog import Tip


class GraphBreaks(Tip):
    code = "PIT608"
    slug = "graph-breaks"
    title = "Compiled forward broken into several graphs with eager code between them"
    faces = "LDK"
    seeds = ()
    truth = (
        "Beyond the seeds; extends PIT601. A graph break is not an error: the model still runs "
        "and gives the same results, which is why it goes unnoticed. Each break ends one graph "
        "and starts another, with the code between them run eagerly by Python; fusion cannot "
        "cross it, and a break that reads a tensor value (`.item()`) also makes the host wait "
        "for the device. `TORCH_LOGS=graph_breaks` prints each break with its reason and line; "
        "`torch.compile(model, fullgraph=True)` turns the first one into an error. Measured here "
        "(torch 2.13 CPU, 2 shared cores): a `.item()`-driven `if` in `forward` "
        "(tests/fixtures/compile/item_branch.py) is 1 break, at that line, and dynamo also "
        "recompiles the code after it once for the Python float the read returned; `pitstop tune` "
        "measured that compiled step 0.11x of eager (interval 0.03-0.49x, 3 pairs, machine load ~10), "
        "with 71 s of cold Inductor compile (10 s from its cache)."
    )

    what = """
        Finds the places where TorchDynamo stops tracing a compiled function or module and falls
        back to Python: a `.item()`, `.tolist()` or `.numpy()` in `forward`, a `print` of a
        tensor, a Python `if` on a tensor's value, or a call dynamo does not support. The
        doctor reports each break the user's code causes with dynamo's reason and the user's
        `file:line` (its own instrumentation stays out of the compiled graphs, see
        `docs/compile.md`); lint flags the same reads inside code the file compiles, and `tune`
        names the breaks when a compiled trial comes out slower.
    """
    why = """
        `torch.compile` fuses the ops of one graph. At a break dynamo compiles what it has traced
        so far, runs the offending code in Python, and starts a new graph after it. The model
        runs as several smaller graphs with eager glue between them: less fusion, more kernel
        launches and, where the break reads a tensor's value, a host-device synchronisation in
        every call. A break inside a loop over layers repeats once per layer.
    """
    example = """
        ```python
        class Net(nn.Module):
            def forward(self, x):
                h = self.encoder(x)
                if h.abs().max().item() > 10:   # reads a value: graph break + sync
                    h = h / 10
                return self.head(h)

        model = torch.compile(Net())
        ```
    """
    use_instead = """
        Keep the decision on the device, so the whole forward is one graph:
        ```python
        def forward(self, x):
            h = self.encoder(x)
            scale = torch.where(h.abs().amax() > 10, 0.1, 1.0)
            return self.head(h * scale)
        ```
        For a real branch use `torch.cond(pred, true_fn, false_fn, (h,))`; move logging and
        `.item()` reads out of `forward` into the loop, every N steps. Check with
        `TORCH_LOGS=graph_breaks python train.py` or `torch.compile(model, fullgraph=True)`.
    """
    when_not = """
        A break at the very start or end of `forward` (e.g. a log line after the last layer)
        costs one extra graph boundary and little else. When the model is dominated by a few
        large matmuls or convolutions, the fused glue is a small share of the step and removing
        breaks changes little. On code that is not compiled there are no graph breaks: the same
        `.item()` is then a plain synchronisation (PIT201).
    """
    references = (
        "PyTorch docs, torch.compile troubleshooting (graph breaks): https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
        "PyTorch docs, torch.cond: https://pytorch.org/docs/stable/generated/torch.cond.html",
        "PyTorch docs, torch._dynamo.explain / TORCH_LOGS: https://pytorch.org/docs/stable/torch.compiler_faq.html",
    )


# --- doctor face ---
import re  # noqa: E402

from pitstop.doctor.analysis.check import SEVERITIES, Check, ms, pct, severity_for, short_where  # noqa: E402


def _fix_for(reason: str, source: str | None) -> str:
    """The fix that fits the cause dynamo gave."""
    text = f"{reason} {source or ''}"
    if any(k in text for k in (".item()", "item()", ".tolist()", "tolist", ".numpy()", "numpy")):
        return ("keep the value on the device (`torch.where(cond, a, b)` instead of a Python `if` on it; "
                "`torch.cond(pred, true_fn, false_fn, (x,))` for a real branch), or move the read out of "
                "`forward` into the loop, every N steps")
    if "print" in text or "logging" in text or "warn" in text:
        return "move the print/logging of tensors out of `forward` (log from the loop, every N steps)"
    if "data-dependent" in text.lower() or "jump" in text.lower() or "if " in (source or ""):
        return ("replace the Python branch on a tensor value by `torch.where` or `torch.cond(pred, true_fn, "
                "false_fn, (x,))`, or decide it outside the compiled function")
    return ("move the call dynamo cannot trace out of the compiled `forward`, or wrap it as a custom op "
            "(`torch.library.custom_op`); `torch.compile(model, fullgraph=True)` shows the first one as an error")



class GraphBreakCheck(Check, tip="PIT608"):
    """One finding per graph break of the user's code (dynamo's reason, the user's line),
    ranked by what it measurably costs: the host-device sync at that line when the break reads
    a value (the doctor times it), otherwise unmeasured (``medium``: fusion stops there)."""

    requires = "compiled"
    looks_at = "graph breaks dynamo reported in the user's compiled code"
    #: most findings listed one by one; the rest are summed up in the last one.
    most = 5

    def check(self, obs, th):
        c = obs.compile
        if c is None or not c.graph_breaks:
            return
        calls = f"each of the {c.calls} calls of the compiled model runs through it" if c.calls else ""
        if not c.breaks:  # counted (torch._dynamo counters) but not located: the log artifacts were off
            yield self.finding(
                th, title=f"{c.graph_breaks} torch.compile graph breaks", severity="medium",
                evidence=f"dynamo counted {c.graph_breaks} graph breaks ({c.source}); their lines were not reported.",
                fix='list them with TORCH_LOGS="graph_breaks" python train.py; ' + _fix_for("", None))
            return
        steps, step = max(obs.steps_observed, 1), obs.mean_step
        for b in c.breaks[:self.most]:
            sync = sum(s.seconds for s in obs.syncs if s.where == b.where) / steps
            share = sync / step if sync and step else None
            sev = severity_for(share, th)
            sev = sev if SEVERITIES.index(sev) < SEVERITIES.index("medium") else "medium"
            where = f"{short_where(b.where)}" + (f" in `{b.function}`" if b.function else "")
            source = re.sub(r"\s+#.*$", "", b.source or "")
            evidence = f"dynamo: {b.reason}" + (f" at `{source}`" if source else "") + ". "
            evidence += "The compiled graph ends there and a new one starts after it, with Python in between"
            evidence += f"; {calls}" if calls else ""
            if sync:
                evidence += f"; the value read there costs {ms(sync)} per step ({pct(share)} of the step)"
            yield self.finding(th, title=f"torch.compile graph break at {where}", evidence=evidence + ".",
                               fix=_fix_for(b.reason, b.source), share=share, severity=sev,
                               where=[b.where] if b.where else [])
        rest = c.breaks[self.most:]
        if rest:
            yield self.finding(th, title=f"{len(rest)} more graph breaks", severity="low",
                               evidence="; ".join(f"{short_where(b.where)}: {b.reason}" for b in rest[:10]),
                               fix=_fix_for("", None), where=[b.where for b in rest if b.where])


# --- lint face ---
from pitstop.lint.rule import LintRule, cst, nodes  # noqa: E402

_READS = {"item", "tolist", "numpy"}
#: tensor methods/functions whose result is a tensor value: a Python branch on it is data-dependent
_VALUE_METHODS = {"any", "all", "sum", "max", "min", "mean", "norm", "abs", "amax", "amin", "isnan", "isinf",
                  "std", "var", "prod", "count_nonzero", "allclose", "equal", "argmax", "argmin"}
_VALUE_FUNCS = {f"torch.{m}" for m in _VALUE_METHODS}
#: shape and metadata reads: static for dynamo (a guard, not a break)
_STATIC = {"shape", "size", "dim", "ndim", "numel", "dtype", "device", "is_cuda", "requires_grad"}


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


class CompiledReadRule(LintRule, tip="PIT608"):
    runs = "step"  # paid every step wherever the reported line is
    """A value read (``.item()``, ``.tolist()``, ``.numpy()``), a ``print`` of computed values
    or a Python ``if``/``while`` on a tensor's value inside code this file compiles: the
    ``forward`` of a module passed to ``torch.compile(...)`` or compiled with ``.compile()``
    (and of the file's modules it builds in ``__init__``), or a function decorated with or
    passed to ``torch.compile``. Nothing is reported where the file does not compile that code."""

    message = "graph break in compiled code: keep the value on the device (torch.where / torch.cond) or move it out of forward"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes: set[str] = set()
        self.functions: set[str] = set()
        self.instances: dict[str, str] = {}     # "model" / "self.encoder" -> class built there
        self.children: dict[str, set[str]] = {}  # class -> classes its __init__ builds
        self.compiled: set[tuple[str | None, str]] = set()
        self.candidates: list[tuple[tuple[str | None, str], object, str]] = []

    # -- what the file defines and compiles -------------------------------------------------
    def visit_ClassDef(self, node):
        self.classes.add(node.name.value)

    def visit_FunctionDef(self, node):
        cls = self.ctx.current_class()
        owner = cls.name.value if cls is not None and self.ctx.current_function() is None else None
        if owner is None:
            self.functions.add(node.name.value)
        for dec in node.decorators:
            target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            if self.ctx.qualname(target) == "torch.compile":
                self.compiled.add((owner, node.name.value))

    def _built_class(self, value) -> str | None:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            return value.func.value
        if isinstance(value, cst.Call) and self.ctx.call_name(value) == "torch.compile":
            args = nodes.positional(value)
            return self._built_class(args[0].value) if args else None
        return None

    def visit_Assign(self, node):
        built = self._built_class(node.value)
        if built is None:
            return
        for t in node.targets:
            key = nodes.dotted(t.target)
            if key:
                self.instances[key] = built
                cls, fn = self.ctx.current_class(), self.ctx.current_function()
                if key.startswith("self.") and cls is not None and fn is not None and fn.name.value == "__init__":
                    self.children.setdefault(cls.name.value, set()).add(built)

    def _target(self, expr) -> tuple[str | None, str] | None:
        built = self._built_class(expr)
        if built is not None:
            return (built, "forward")
        key = nodes.dotted(expr)
        if key is None:
            return None
        if key.endswith(".forward") and key[:-8] in self.instances:
            return (self.instances[key[:-8]], "forward")
        if key in self.instances:
            return (self.instances[key], "forward")
        return (None, key)  # a function by name (kept only if the file defines it)

    # -- candidates ----------------------------------------------------------------------------
    def _where(self) -> tuple[str | None, str] | None:
        fn = self.ctx.current_function()
        if fn is None:
            return None
        cls = self.ctx.current_class()
        # a method is the class's; a nested function or a module-level one is a function
        frames = self.ctx.function_frames()
        owner = cls.name.value if cls is not None and not any(getattr(f, "kind", None) == "function" for f in frames) else None
        return (owner, fn.name.value)

    def _candidate(self, node, message: str) -> None:
        key = self._where()
        if key is not None:
            self.candidates.append((key, node, message))

    def visit_Call(self, node):
        name = self.ctx.call_name(node)
        if name == "torch.compile":
            args = nodes.positional(node)
            target = self._target(args[0].value) if args else None
            if target is not None:
                self.compiled.add(target)
            return
        method = nodes.method(node)
        if method == "compile" and not node.args and isinstance(node.func, cst.Attribute):
            key = nodes.dotted(node.func.value)
            if key in self.instances:
                self.compiled.add((self.instances[key], "forward"))
        if method in _READS and not nodes.method(nodes.receiver(node)) in _READS:
            self._candidate(node, f".{method}() in compiled code reads a tensor value on the host: a graph break "
                                  "(and a sync) on every call; keep it on the device (torch.where / torch.cond) or "
                                  "move the read out of forward")
        elif isinstance(node.func, cst.Name) and node.func.value == "print" and self._computed(node):
            self._candidate(node, "print of computed values in compiled code: a graph break on every call; log "
                                  "from the training loop instead")

    def _computed(self, call) -> bool:
        for a in call.args:
            v = a.value
            if isinstance(v, (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float)):
                continue
            if isinstance(v, cst.FormattedString) and not any(isinstance(p, cst.FormattedStringExpression) for p in v.parts):
                continue
            return True
        return False

    def _branch(self, test) -> None:
        found = None
        for n in _walk(test):
            if isinstance(n, cst.Attribute) and n.attr.value in _STATIC:
                return
            if isinstance(n, cst.Call):
                if nodes.method(n) in _READS:
                    return  # reported at the read itself
                if isinstance(n.func, cst.Name) and n.func.value in ("len", "isinstance", "hasattr", "getattr"):
                    return
                if nodes.method(n) in _STATIC:
                    return
                if found is None and (nodes.method(n) in _VALUE_METHODS or self.ctx.call_name(n) in _VALUE_FUNCS):
                    found = n
        if found is not None:
            self._candidate(test, "Python branch on a tensor's value in compiled code: a graph break on every "
                                  "call; use torch.where or torch.cond(pred, true_fn, false_fn, operands)")

    def visit_If(self, node):
        self._branch(node.test)

    def visit_While(self, node):
        self._branch(node.test)

    def visit_IfExp(self, node):
        self._branch(node.test)

    # -- decided on the whole file -----------------------------------------------------------------
    def finish(self):
        compiled = {c for c in self.compiled if c[0] is not None or c[1] in self.functions}
        todo = [c for c, fn in compiled if c is not None]
        while todo:  # the modules a compiled module builds in __init__ run inside its graph
            for child in self.children.get(todo.pop(), ()):
                if (child, "forward") not in compiled:
                    compiled.add((child, "forward"))
                    todo.append(child)
        for key, node, message in self.candidates:
            if key in compiled:
                self.report(node, message)
