"""PIT605 inference-mode: evaluate without autograd, under torch.inference_mode()."""

from __future__ import annotations

from pitstop.catalog import Tip


class InferenceMode(Tip):
    code = "PIT605"
    slug = "inference-mode"
    title = "Evaluation without torch.inference_mode(), or with autograd still recording"
    faces = "LDE"
    seeds = ("000", "002")
    truth = (
        "Seed 000 overstates two points. Tensors made under `inference_mode` are not immutable: "
        "they can be changed in place inside inference mode; outside it, in-place updates raise "
        "and autograd refuses to save them for backward (an MSE distillation loss against a "
        "teacher output computed in inference mode raised here). And `no_grad` does not leave "
        "\"intermediate tensors that carry gradients\": its results have `requires_grad=False` "
        "and no graph either; it merely keeps version counters and view tracking, so its "
        "results can enter autograd later. The speed difference between the two is small: none "
        "measured here (4x Linear(1024, 1024)+ReLU, batch 512: no_grad 29.70 ms, inference_mode "
        "29.65 ms; one thread, CPU time, 2-core Xeon). The real waste is leaving autograd on: "
        "32.3 ms (about 9% slower), and the graph keeps every saved activation alive as long as "
        "the output lives."
    )

    what = """
        Flags an evaluation decorated with `@torch.no_grad()` or containing `with torch.no_grad():`,
        reported at the decorator or the `with`; and an evaluation that calls a model under
        neither `no_grad` nor `inference_mode`, reported at the function name. An evaluation is a
        function named for it (`eval`, `valid`, `test`, `predict`, `infer`, `zero_shot`) that also
        loops over a loader or switches a model to eval mode, or a function of any name that does
        both; and it trains nothing (no `.backward()`, no optimizer step: `train_and_eval` is not
        one). Names alone never make an evaluation. How often it runs is the finding's frequency:
        an evaluation run once after training is a one-time finding (`pitstop lint --all` shows
        it). A "model call" is a call of
        something named like a model (`model(x)`, `self.net(x)`), not a verb on one
        (`load_model(...)`), and never a function decorated `@torch.no_grad()`/`inference_mode()`
        in the file or the project. Not flagged: unit tests, the hooks of a framework class (a
        LightningModule's `validation_step`: the Trainer already runs it without autograd), and
        projects whose code shards the model with FSDP (`fully_shard`, `FullyShardedDataParallel`)
        or DeepSpeed in any linted file, not only the evaluating one (their parameter all-gathers
        fail under `inference_mode` on older torch; the message carries that caveat). The fix
        `torch.inference_mode()` is offered as unsafe (its outputs cannot enter autograd later).
        At run time the doctor checks whether evaluation forward passes run with gradient
        recording enabled.
    """
    why = """
        With grad mode on, every forward op records a node in the autograd graph and saves the
        tensors its backward would need; for a forward that is never differentiated that is
        wasted time and memory held until the outputs are freed. `no_grad` stops the recording.
        `inference_mode` goes further: it also skips version-counter bumps and view tracking,
        which is what makes its outputs unusable by autograd afterwards.
    """
    example = """
        ```python
        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            ...

        def predict(model, x):
            return model(x)          # autograd records the whole forward
        ```
    """
    use_instead = """
        ```python
        @torch.inference_mode()
        def evaluate(model, loader):
            model.eval()             # inference_mode does not switch to eval mode (PIT803)
            correct = 0
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum()
            return correct.item() / len(loader.dataset)
        ```
    """
    when_not = """
        When the results must later enter autograd, keep `torch.no_grad()` (or `.clone()` the
        result outside inference mode): for example teacher outputs used as targets in a
        distillation loss, features cached for a later training step, or tensors updated in
        place after evaluation. Compared with `no_grad` the gain is small (none measured here);
        compared with leaving grad on it saves time and, mostly, memory.
    """
    references = (
        "PyTorch docs, torch.inference_mode: https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
        "PyTorch docs, Autograd mechanics — Locally disabling gradient computation (grad modes, inference mode): https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
        "PyTorch Performance Tuning Guide — Disable gradient calculation for validation or inference: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Seeds 000 (`@torch.inference_mode()` for evaluation), 002 (No grad and inference_mode decorators)",
    )
    engine = "fit evaluates eval_loader under torch.inference_mode() with model.eval(), and puts the model back in train mode afterwards."


# --- lint face ---
from pitstop.lint.rule import UNSAFE, LintRule, cst, nodes

#: the caveat every PIT605 message carries (issue 31): a sharded model's all-gather runs inside the forward
_FSDP = " (not under FSDP or DeepSpeed ZeRO: their parameter all-gathers fail under inference_mode on older torch)"


class _Eval:
    """What one candidate evaluation function does (the lint decides at its end)."""

    __slots__ = ("node", "grad_off", "model_called", "evidence", "trains", "reports", "named", "loops", "evals",
                 "sharded")

    def __init__(self, node):
        self.node, self.grad_off, self.model_called, self.evidence, self.trains = node, False, False, False, False
        self.named = self.loops = self.evals = False  # named for evaluation; loops over a loader; calls .eval()
        self.sharded = False  # the project shards its model (FSDP, DeepSpeed)
        self.reports = []  # (node, expr) of each no_grad decorator / with item


class InferenceModeRule(LintRule, tip="PIT605"):
    message = "evaluation under torch.no_grad(); torch.inference_mode() also skips version counting and view tracking" + _FSDP
    in_tests = False
    fix = UNSAFE

    def __init__(self, ctx):
        super().__init__(ctx)
        self.stack = []  # per function: None, or an _Eval

    def _fix(self, expr):
        func = expr.func if isinstance(expr, cst.Call) else expr
        if isinstance(func, cst.Attribute):
            return self.ctx.fix(UNSAFE, "Use torch.inference_mode() (its tensors cannot enter autograd later)",
                                (func.attr, "inference_mode"))
        return None

    def visit_FunctionDef(self, node):
        ctx = self.ctx
        if ctx.in_unit_test(node) or ctx.framework_class() is not None:
            # unit tests; framework hooks (the Trainer runs them without autograd)
            self.stack.append(None)
            return
        state = _Eval(node)
        # a project that shards its model with FSDP or DeepSpeed anywhere in its code (issue 42: known from the
        # project, not the file) keeps no_grad; an evaluation with autograd on still wants torch.no_grad()
        state.sharded = ctx.shards_model
        state.named = ctx.is_eval_function(node) or "zero_shot" in node.name.value.lower() \
            or "zeroshot" in node.name.value.lower()
        for d in node.decorators:
            mode = ctx.grad_mode(d.decorator)
            if mode:
                state.grad_off = True
            if mode == "no_grad":
                state.reports.append((d, d.decorator))
        self.stack.append(state)

    def leave_FunctionDef(self, node):
        state = self.stack.pop()
        # names alone never make an evaluation: it also loops over a loader or switches a model to eval
        # mode, and trains nothing; a function of any name that does both (a zero-shot classification loop)
        # is one too. How often it runs is the finding's frequency (issue 42: a one-time evaluation is a
        # finding in code that runs once, shown with --all, never silenced)
        if state is None or state.trains or not (state.named and state.evidence or state.loops and state.evals):
            return
        for where, expr in () if state.sharded else state.reports:
            self.report(where, fix=self._fix(expr), function=node)
        if not state.grad_off and state.model_called:
            advice = ("wrap it in torch.no_grad() (the project shards its model: inference_mode breaks FSDP/DeepSpeed "
                      "all-gathers on older torch)" if state.sharded else "wrap it in torch.inference_mode()" + _FSDP)
            self.report(node.name, f"`{node.name.value}` runs the model with autograd on; " + advice, function=node,
                        pattern="autograd-on")

    def _state(self):
        state = self.stack[-1] if self.stack else None
        return state if state is not None and self.ctx.current_function() is state.node else None

    def visit_With(self, node):
        state = self._state()
        if state is None:
            return
        for item in node.items:
            mode = self.ctx.grad_mode(item.item)
            if mode:
                state.grad_off = True
            if mode == "no_grad":
                state.reports.append((item.item, item.item))

    def visit_For(self, node):
        state = self._state()
        if state is not None and self.ctx.iterates_loader(node.iter):
            state.evidence = state.loops = True

    visit_CompFor = visit_For  # [model(x) for x in loader]

    def visit_Call(self, node):
        state = self._state()
        if state is None:
            return
        method = nodes.method(node)
        if method == "enter_context" and node.args and self.ctx.grad_mode(node.args[0].value):
            state.grad_off = True  # stack.enter_context(torch.no_grad()) (detectron2's inference_on_dataset)
        elif method == "eval" and not node.args:
            state.evidence = state.evals = True
        elif method in ("backward", "manual_backward") or method == "step" and self.ctx.is_optimizer(node.func.value):
            state.trains = True
        elif not state.model_called and self.ctx.is_model_call(node):
            state.model_called = True


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402


class InferenceModeCheck(Check, tip="PIT605"):
    looks_at = "grad mode of evaluation forwards"

    def check(self, obs, th):
        f = obs.forwards
        where = f.where
        if f.eval_with_grad:
            share = obs.share("eval")
            spent = f" ({pct(share)} of each step is evaluation)" if share else ""
            # the graph costs at most the evaluation's own time: below the medium bar it is low
            severity = "low" if obs.breakdown is not None and share < th.medium_share else "medium"
            yield self.finding(
                th, title="Evaluation forwards record autograd graphs",
                evidence=f"{f.eval_with_grad} forwards ran with gradients enabled but their graph never reached "
                         f"a backward (first at {where.get('eval_with_grad', '?')}): evaluation that builds a graph "
                         f"and keeps its activations{spent}.",
                fix="with torch.inference_mode(): around the evaluation loop", severity=severity,
                where=[where.get("eval_with_grad", "?")])
        if f.eval_no_grad:
            yield self.finding(
                th, title="Evaluation under no_grad instead of inference_mode",
                evidence=f"{f.eval_no_grad} forwards ran under torch.no_grad() (first at {where.get('eval_no_grad', '?')}); "
                         "inference_mode also skips version counters and view tracking.",
                fix="with torch.inference_mode(): (use no_grad only when the outputs must enter autograd later)",
                severity="low", where=[where.get("eval_no_grad", "?")])
