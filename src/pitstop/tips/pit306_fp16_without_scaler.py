"""PIT306 fp16-without-scaler: fp16 autocast training needs a GradScaler (bf16 does not)."""

from __future__ import annotations

from pitstop.catalog import Tip


class Fp16WithoutScaler(Tip):
    code = "PIT306"
    slug = "fp16-without-scaler"
    title = "fp16 autocast training without a GradScaler: small gradients underflow to zero"
    faces = "LD"
    seeds = ("001", "003")
    truth = (
        "fp16's largest value is 65504 and its smallest normal 6.1e-5 (torch.finfo); below that, "
        "subnormals lose precision down to 2^-24 (about 6e-8), and smaller values become zero. "
        "Checked here: `torch.tensor(1e-8).half()` is 0.0 while bfloat16 keeps 1.0e-8, because "
        "bf16 has fp32's exponent range (smallest normal 1.2e-38). Seeds 001 and 003 pair fp16 autocast "
        "with a GradScaler, as they should; with bf16 the scaler is unnecessary. Note that "
        "`torch.amp.autocast(\"cuda\")` without `dtype` means fp16 (checked in torch 2.13)."
    )

    what = """
        Flags CUDA autocast in fp16 (an explicit `dtype=torch.float16` or `torch.half`, no
        `dtype` on device `"cuda"`, or `torch.cuda.amp.autocast()`) in a function (or at module
        level) that also calls `.backward()`, in a file that never makes a loss scaler
        (`GradScaler`, timm's `NativeScaler`, anything named `*scaler*`). Autocast used for
        inference only (an eval function, under `no_grad`) is not flagged, nor is a file where
        a framework or an optimizer owns the loss scaling (`Accelerator(mixed_precision=...)`,
        `Fabric`/`Trainer(precision=...)`, `accelerator.backward(loss)`,
        `optimizer.backward(loss)`). The finding is reported at the
        autocast call; there is no autofix. At run time the doctor checks whether the forward
        pass runs under fp16 autocast while the loss is not scaled.
    """
    why = """
        Under fp16 autocast, the gradients that flow backward through fp16 ops are fp16 too
        (backward runs in the forward's dtypes). Gradient values too small for fp16 become
        zero ("underflow"), and the updates of the parameters behind them are lost, silently.
        `GradScaler` multiplies the loss by a large factor (65536 at the start) so those values
        stay representable, divides the gradients back before the optimizer step, skips steps
        whose gradients overflowed to inf/NaN, and adapts the factor as training goes.
    """
    example = """
        ```python
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        loss.backward()          # fp16 gradients, no loss scaling
        optimizer.step()
        ```
    """
    use_instead = """
        bf16 where the hardware has it (Ampere+ GPUs, recent Xeons): same range as fp32, no
        scaler:
        ```python
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        ```
        fp16 (e.g. GPUs before Ampere, which have no bf16 tensor cores) with a scaler:
        ```python
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        ```
    """
    when_not = """
        Not needed for bf16 autocast (the rule does not fire there), for fp16 inference (no
        backward), or when the whole training already runs under a framework that scales
        the loss for you. An fp16 model whose gradients happen to stay in range trains fine
        without a scaler, but nothing tells you when they stop doing so. The scaler itself
        costs a little per step (an inf/NaN check over the gradients); it is not a speed-up.
    """
    references = (
        "PyTorch docs, Automatic Mixed Precision package — Gradient Scaling: https://pytorch.org/docs/stable/amp.html",
        "PyTorch docs, Automatic Mixed Precision examples: https://pytorch.org/docs/stable/notes/amp_examples.html",
        "Micikevicius et al., Mixed Precision Training (loss scaling), ICLR 2018: https://arxiv.org/abs/1710.03740",
        "Seed 001 (GradScaler in its mixed-precision example), seed 003 (torch.cuda.amp with GradScaler)",
    )


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes


_OWNERS = ("accelerator", "fabric", "engine", "optimizer", "optim", "deepspeed", "booster")
_FRAMEWORKS = ("Accelerator", "Fabric", "Trainer")  # own the precision and its loss scaling
_FRAMEWORK_ROOTS = ("accelerate.", "lightning.", "lightning_fabric.", "pytorch_lightning.", "transformers.", "trl.")


class Fp16WithoutScalerRule(LintRule, tip="PIT306"):
    runs = "step"  # paid every step wherever the reported line is
    message = "fp16 autocast without a GradScaler: small gradients underflow to zero; use torch.amp.GradScaler or bf16"
    in_tests = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.fp16 = []  # (autocast call, its function, inference only?)
        self.backward_in = set()  # functions (None: module level) calling a plain .backward()
        self.scaler = False  # a scaler, or a framework/optimizer that scales the loss itself

    def visit_Call(self, node):
        ctx = self.ctx
        name = nodes.method(node)
        if name in ("backward", "manual_backward"):
            owner = (nodes.last_name(nodes.receiver(node)) or "").lower()
            if name == "manual_backward" or node.args and node.args[0].keyword is None and any(o in owner for o in _OWNERS):
                self.scaler = True  # accelerator.backward / fabric.backward / optimizer.backward(loss) scale it
            else:
                self.backward_in.add(ctx.current_function())
            return
        q = ctx.call_name(node)
        callee = nodes.last_name(node.func) or ""
        if "scaler" in callee.lower() or q and q.rsplit(".", 1)[-1] in _FRAMEWORKS and q.startswith(_FRAMEWORK_ROOTS):
            self.scaler = True
        elif ctx.is_autocast(node) and self._fp16(node, q):
            fn = ctx.current_function()
            inference = ctx.is_eval_function(fn) or any(ctx.grad_mode(c) for c in ctx.with_calls())
            self.fp16.append((node, fn, inference))

    def _fp16(self, node, q):
        enabled = nodes.kwarg(node, "enabled")
        if enabled is not None and nodes.is_false(enabled.value):
            return False
        legacy = q.startswith(("torch.cuda.amp.", "torch.cpu.amp."))
        dtype = nodes.arg(node, "dtype", 1)
        device = None if legacy else nodes.arg(node, "device_type", 0)
        device_str = nodes.string_value(device.value) if device is not None else None
        if q.startswith("torch.cpu.amp.") or (device_str is not None and not device_str.startswith("cuda")):
            return False
        if dtype is not None:
            return self.ctx.qualname(dtype.value) in ("torch.float16", "torch.half")
        return q.startswith("torch.cuda.amp.") or device_str is not None

    def finish(self):
        if self.scaler:
            return
        for node, fn, inference in self.fp16:
            if fn in self.backward_in and not inference:  # autocast for inference needs no scaler
                self.report(node)


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class Fp16WithoutScalerCheck(Check, tip="PIT306"):
    looks_at = "fp16 autocast in training forwards without GradScaler.scale"

    def check(self, obs, th):
        fp16 = obs.forwards.autocast.get("float16", 0)
        if not fp16 or obs.scaler_calls:
            return
        yield self.finding(
            th, title="fp16 autocast without a GradScaler",
            evidence=f"{fp16} training forwards ran under float16 autocast and GradScaler.scale was never "
                     "called: small gradients underflow to zero in fp16.",
            fix="scaler = torch.amp.GradScaler(); scaler.scale(loss).backward(); scaler.step(opt); scaler.update() "
                "-- or bf16 autocast, which needs no scaler",
            kind="correctness", severity="high")
