"""PIT302 deprecated-amp-api: spell autocast and GradScaler through torch.amp, drop apex amp."""

from __future__ import annotations

from pitstop.catalog import Tip


class DeprecatedAmpApi(Tip):
    code = "PIT302"
    slug = "deprecated-amp-api"
    title = "torch.cuda.amp / torch.cpu.amp / apex.amp instead of torch.amp"
    faces = "L"
    seeds = ("003", "004")
    truth = (
        "Seed 003's `torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` still work but are "
        "deprecated: in torch 2.13 each emits a FutureWarning asking for "
        "`torch.amp.autocast('cuda', ...)` / `torch.amp.GradScaler('cuda', ...)` (and "
        "`torch.amp.autocast('cpu', ...)` for `torch.cpu.amp.autocast`). Seed 004's apex amp is "
        "obsolete: its author recommended native AMP over it once that landed in PyTorch "
        "(NVIDIA/apex#818), and `apex.amp` was removed from NVIDIA apex in May 2025 "
        "(NVIDIA/apex#1896). Seed 004's `pip install ... amp` line does not install apex either: "
        "apex is built from its GitHub source."
    )

    what = """
        Flags calls of `torch.cuda.amp.autocast`, `torch.cpu.amp.autocast` and
        `torch.cuda.amp.GradScaler` and imports of them (`from torch.cuda.amp import autocast,
        GradScaler`), plus imports of `apex.amp` and calls of `amp.initialize`. Names are
        resolved through imports and aliases; the finding is reported at the call or import.
        Calls spelled `torch.cuda.amp.…(…)` get an autofix to `torch.amp.autocast("cuda", …)`
        and `torch.amp.GradScaler("cuda", …)` (autocast only with keyword arguments, whose
        positional order differs). The fix is *safe* only when the file already uses the new
        spelling (proof that the torch it supports has it; `torch.amp.GradScaler` is new in
        torch 2.3), else *unsafe*. Deliberate old-torch fallbacks are not flagged at all: an
        `except (AttributeError, TypeError, ImportError)` handler, a `try`/`except ImportError`
        import, or either branch of an `if`/conditional expression testing a version or an
        attribute (`if _TORCH_GREATER_EQUAL_2_4 ... else ...`, `if hasattr(torch, "amp")`).
        Imports, calls through imported names and apex code get no automatic fix (apex needs
        the rewrite shown below).
    """
    why = """
        Not a speed problem but a maintenance one. The device-specific classes are thin
        deprecated wrappers over `torch.amp`: the installed torch (2.13) warns when they are
        used, and a deprecated spelling can be removed in a later release. apex amp was a
        separate package, built from source against your torch, that patched torch functions
        (`amp.initialize` with an `opt_level`); native AMP replaced it, and current apex no
        longer ships it, so `from apex import amp` fails on a fresh install.

        The rewrite keeps the numbers identical: `torch.amp.autocast("cuda")` without `dtype`
        means float16, exactly like `torch.cuda.amp.autocast()` (checked in torch 2.13:
        `torch.get_autocast_dtype("cuda")` is `torch.float16`; for `"cpu"` it is bfloat16).
        When migrating by hand, keep `enabled=` as a keyword: the second positional parameter
        of `torch.amp.autocast` is `dtype`, not `enabled`.
    """
    example = """
        ```python
        from torch.cuda.amp import autocast, GradScaler

        scaler = GradScaler()
        with autocast():
            loss = loss_fn(model(x), y)
        ```
        or, with apex (seed 004):
        ```python
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        ```
    """
    use_instead = """
        ```python
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda", dtype=torch.float16):   # torch.autocast is the same
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        ```
        With `dtype=torch.bfloat16` drop the scaler altogether (PIT301, PIT306).
    """
    when_not = """
        It changes no result and no speed: the old and new spellings run the same code. The
        point is forward compatibility and a clean log. Code that must still run on PyTorch
        releases older than `torch.amp.GradScaler` can keep the old spelling and silence the
        rule with `# noqa: PIT302`.
    """
    references = (
        "PyTorch docs, Automatic Mixed Precision package — torch.amp: https://pytorch.org/docs/stable/amp.html",
        "PyTorch docs, Automatic Mixed Precision examples: https://pytorch.org/docs/stable/notes/amp_examples.html",
        "NVIDIA/apex issue #818, \"torch.cuda.amp > apex amp\" (apex amp's author): https://github.com/NVIDIA/apex/issues/818",
        "NVIDIA/apex pull request #1896, \"remove old features: amp, ddp, and rnn\" (May 2025): https://github.com/NVIDIA/apex/pull/1896",
        "Seed 003 (Mixed Precision package: torch.cuda.amp), seed 004 (mixed precision with apex amp)",
    )


# --- lint face ---
import re  # noqa: E402

from pitstop.lint.rule import SAFE, UNSAFE, LintRule, cst, nodes  # noqa: E402

_OLD = {
    "torch.cuda.amp.autocast": ("cuda", "autocast"),
    "torch.cuda.amp.autocast_mode.autocast": ("cuda", "autocast"),
    "torch.cpu.amp.autocast": ("cpu", "autocast"),
    "torch.cpu.amp.autocast_mode.autocast": ("cpu", "autocast"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("cuda", "GradScaler"),
}


_VERSION_TEST = re.compile(r"version|TORCH_|_TORCH|GREATER|LESS|hasattr|getattr|_AVAILABLE|_available", re.I)
_FALLBACK_ERRORS = frozenset({"AttributeError", "TypeError", "ImportError", "ModuleNotFoundError", "Exception"})
#: the new spelling already used in the file proves the torch it supports has it
_NEW_API = {"GradScaler": re.compile(r"(?<!cuda)(?<!cpu)\.amp\.GradScaler\("),
            "autocast": re.compile(r"(?<!cuda)(?<!cpu)\.amp\.autocast\(|\btorch\.autocast\(")}


class DeprecatedAmpRule(LintRule, tip="PIT302"):
    concern = "deprecation"  # never hidden as one-time: it breaks when torch removes it, however often it runs
    message = "deprecated AMP API; use torch.amp.autocast(device, ...) / torch.amp.GradScaler(device)"
    fix = SAFE

    def _fallback(self):
        """In a deliberate old-torch fallback: an ``except (AttributeError, TypeError, ImportError)``
        handler, or either branch of an ``if``/conditional expression that tests a version or an
        attribute (``if _TORCH_GREATER_EQUAL_2_4 ... else``, ``if hasattr(torch, "amp")``)."""
        ctx = self.ctx
        for node in ctx.ancestors:
            if isinstance(node, cst.ExceptHandler):
                names = {nodes.last_name(e) for e in _handler_types(node)}
                if not names or names & _FALLBACK_ERRORS:
                    return True
            elif isinstance(node, (cst.If, cst.IfExp)) and _VERSION_TEST.search(ctx.source_of(node.test)):
                return True
            elif isinstance(node, cst.Try) and any(
                    {nodes.last_name(e) for e in _handler_types(h)} & {"ImportError", "ModuleNotFoundError"}
                    for h in node.handlers):
                return True  # try: from torch.amp import ... except ImportError: ...
        return False

    def visit_Call(self, node):
        ctx = self.ctx
        q = ctx.call_name(node)
        if q in _OLD and self._fallback():
            return
        if q in _OLD:
            device, name = _OLD[q]
            self.report(node, f'{q}(...) is deprecated; use torch.amp.{name}("{device}", ...)',
                        fix=self._fix(node, device, name))
        elif q == "apex.amp.initialize":
            self.report(node, "apex.amp is obsolete; use torch.amp.autocast (and torch.amp.GradScaler for fp16)")

    def _fix(self, node, device, name):
        f = node.func  # <torch>.<device>.amp.<name>(...) with keyword arguments only
        ctx = self.ctx
        if not (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Attribute) and f.value.attr.value == "amp"
                and isinstance(f.value.value, cst.Attribute) and f.value.value.attr.value == device
                and ctx.qualname(f.value.value.value) == "torch"):
            return None
        if name == "autocast" and nodes.positional(node) or any(a.star == "*" for a in node.args):
            return None  # torch.amp.autocast's positional parameters differ
        root = ctx.source_of(nodes.strip_parens(f.value.value.value))
        first = cst.Arg(cst.SimpleString(f'"{device}"'))
        if node.args:
            first = first.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new = node.with_changes(func=cst.parse_expression(f"{root}.amp.{name}"), args=[first, *node.args])
        # safe only when the file already uses the new spelling (its torch has it: torch.amp.GradScaler
        # is new in torch 2.3); otherwise the rewrite could break the older torch the file supports
        proven = ctx.source is not None and _NEW_API[name].search(ctx.source) is not None
        how = SAFE if proven else UNSAFE
        note = "" if proven else " (needs a torch that has it: 2.3+ for GradScaler)"
        return ctx.fix(how, f'Use {root}.amp.{name}("{device}", ...){note}', (node, new))

    def visit_ImportFrom(self, node):
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar) or self._fallback():
            return
        module = nodes.dotted(node.module)
        for alias in node.names:
            name = nodes.dotted(alias.name)
            if module in ("torch.cuda.amp", "torch.cpu.amp") and name in ("autocast", "GradScaler"):
                self.report(alias, f"{module}.{name} is deprecated; import torch.amp.{name} and pass the device")
            elif module == "apex" and name == "amp" or (module or "").startswith("apex.amp"):
                self.report(alias, "apex.amp is obsolete; use torch.amp.autocast (and torch.amp.GradScaler for fp16)")

    def visit_Import(self, node):
        for alias in node.names:
            name = nodes.dotted(alias.name) or ""
            if name == "apex.amp" or name.startswith("apex.amp."):
                self.report(alias, "apex.amp is obsolete; use torch.amp.autocast (and torch.amp.GradScaler for fp16)")


def _handler_types(handler):
    t = handler.type
    if t is None:
        return []
    return [e.value for e in t.elements] if isinstance(t, cst.Tuple) else [t]
