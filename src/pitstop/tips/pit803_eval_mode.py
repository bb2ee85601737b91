"""PIT803 eval-mode: switch the model to eval() for validation; no_grad does not do it."""

from __future__ import annotations

from pitstop.catalog import Tip


class EvalMode(Tip):
    code = "PIT803"
    slug = "eval-mode"
    title = "Validation forward with the model still in training mode (dropout and BatchNorm active)"
    faces = "LD"
    seeds = ("000", "002")
    truth = (
        "Implied by the seeds rather than stated. Seed 000's `evaluate_model` runs under "
        "`@torch.inference_mode()` but never calls `model.eval()`: inference mode turns off "
        "autograd, not dropout or BatchNorm's batch statistics. Seed 002's decorated examples "
        "do call `model.eval()`. Checked here: a `BatchNorm1d` in training mode updated its "
        "running mean under `torch.no_grad()`, and `Dropout(0.5)` still zeroed elements under "
        "`torch.inference_mode()`."
    )

    what = """
        Flags an eval function (its name contains `eval`, `valid`, `test`, `predict` or
        `infer`) that runs under `no_grad`/`inference_mode` and calls a model but never calls
        `.eval()` nor `.train(False)`, nor enters a helper that does (`inference_context(model)`).
        Not flagged when the caller already called `.eval()` before calling it (in the same
        file), in unit tests, or in the hooks of a framework class (the Lightning Trainer calls
        `.eval()` around `validation_step`). It reports at the function name and offers no fix. At
        run time the doctor flags forward passes run without gradients while the model is
        still in training mode (`model.training == True`).
    """
    why = """
        Grad mode and module mode are independent switches. `no_grad`/`inference_mode` only
        stop autograd from recording; `model.eval()` changes what layers compute. In training
        mode, Dropout keeps dropping activations, so validation metrics are noisy and
        pessimistic; BatchNorm normalizes with the statistics of the current validation batch
        (results then depend on batch size and composition) and updates its running averages
        with validation data, changing the model you are measuring.
    """
    example = """
        Seed 000's evaluation function:
        ```python
        @torch.inference_mode()
        def evaluate_model(input_data):
            output = model(input_data)       # dropout and BatchNorm still in train mode
            return output
        ```
    """
    use_instead = """
        ```python
        @torch.inference_mode()
        def evaluate(model, loader):
            was_training = model.training
            model.eval()                     # dropout off, BatchNorm uses running stats
            correct = 0
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum()
            model.train(was_training)        # back to training mode afterwards
            return correct.item() / len(loader.dataset)
        ```
    """
    when_not = """
        A model without dropout, BatchNorm or other mode-dependent layers computes the same
        thing in both modes (the call is still free). A model loaded with Hugging Face's
        `from_pretrained(...)` is already in eval mode. Some techniques want training mode on
        purpose, such as Monte Carlo dropout for uncertainty estimates or re-estimating
        BatchNorm statistics on new data; mark those `# noqa: PIT803`. The mirror bug is
        forgetting `model.train()` after validation: the rest of training then runs without
        dropout and with BatchNorm statistics no longer updated.
    """
    references = (
        "PyTorch docs, torch.nn.Module.eval: https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval",
        "PyTorch docs, Autograd mechanics — Locally disabling gradient computation (evaluation mode is not a grad mode): https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation",
        "PyTorch docs, torch.nn.BatchNorm2d (running statistics in training vs. evaluation): https://pytorch.org/docs/stable/generated/torch.nn.BatchNorm2d.html",
        "Seed 000 (inference_mode for evaluation), seed 002 (No grad and inference_mode decorators)",
    )


# --- lint face ---
import re  # noqa: E402

from pitstop.lint.rule import LintRule, cst, nodes  # noqa: E402


class EvalModeRule(LintRule, tip="PIT803"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    message = "evaluation runs the model without model.eval(): dropout and BatchNorm stay in training mode"
    in_tests = False

    def __init__(self, ctx):
        super().__init__(ctx)
        self.stack = []  # per function: None, or [node, grad disabled?, model called?, eval called?]
        self.evaled = set()  # functions (None: module level) that called .eval() so far
        self.called_after_eval = set()  # names called after the caller had called .eval()
        self.candidates = []

    def visit_FunctionDef(self, node):
        ctx = self.ctx
        if not ctx.is_eval_function(node) or ctx.in_unit_test(node) or ctx.framework_class() is not None:
            self.stack.append(None)  # unit tests; framework hooks (the Trainer calls .eval() first)
            return
        self.stack.append([node, any(ctx.grad_mode(d.decorator) for d in node.decorators), False, False])

    def leave_FunctionDef(self, node):
        state = self.stack.pop()
        if state is not None and state[1] and state[2] and not state[3]:
            self.candidates.append(node)

    def finish(self):
        for node in self.candidates:
            if node.name.value not in self.called_after_eval:  # else the caller set eval mode
                self.report(node.name, f"`{node.name.value}` runs the model without model.eval(): "
                                       "dropout and BatchNorm stay in training mode", function=node)

    def _state(self):
        state = self.stack[-1] if self.stack else None
        return state if state is not None and self.ctx.current_function() is state[0] else None

    def visit_With(self, node):
        state = self._state()
        if state is not None and any(self.ctx.grad_mode(i.item) for i in node.items):
            state[1] = True

    def visit_Call(self, node):
        name = nodes.method(node)
        is_eval = name == "eval" and not node.args or name == "train" and node.args and nodes.is_false(node.args[0].value)
        fn = self.ctx.current_function()
        if is_eval:
            self.evaled.add(fn)
        elif fn in self.evaled:
            callee = nodes.last_name(node.func)
            if callee:
                self.called_after_eval.add(callee)
        state = self._state()
        if state is None:
            return
        if is_eval:
            state[3] = True
        elif name == "enter_context" and node.args and self.ctx.grad_mode(node.args[0].value):
            state[1] = True
        elif _eval_context(node) or name == "from_pretrained":
            state[3] = True  # inference_context(model) / eval_mode(model) set eval mode; so does Hugging Face's
            # from_pretrained (the model it returns is in eval mode)
        elif self.ctx.is_model_call(node):
            state[2] = True


_EVAL_CONTEXT = re.compile(r"(inference|eval).*(context|mode)|^evaluating$")


def _eval_context(call):
    """``inference_context(model)``, ``eval_mode(model)``, ``evaluating(net)``: a call that is given
    a model and is named for evaluation (a context manager that switches it to eval mode)."""
    name = (nodes.last_name(call.func) or "").lower() if isinstance(call, cst.Call) else ""
    return bool(call.args) and _EVAL_CONTEXT.search(name) is not None


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class EvalModeCheck(Check, tip="PIT803"):
    looks_at = "evaluation forwards (no gradients, or a graph that never reached a backward) in training mode"

    def check(self, obs, th):
        where_map = obs.forwards.where
        for m in obs.models:
            fw = m.forwards
            n = fw.train_mode_eval or fw.nograd_train_mode
            if n and m.mode_dependent:
                key = "train_mode_eval" if "train_mode_eval" in where_map else "nograd_train_mode"
                where = where_map.get(key, "?")
                nograd = fw.nograd_train_mode
                how = (f"{nograd} without gradients, {n - nograd} with gradients but no backward" if nograd < n
                       else "without gradients")
                yield self.finding(
                    th, title="Evaluation with the model in training mode",
                    evidence=f"{n} evaluation forwards of {m.cls} ran while model.training was True ({how}; "
                             f"first at {where}); it has dropout/batch-norm layers, so the results differ from eval "
                             "mode and batch-norm statistics are updated by validation data.",
                    fix="model.eval() before evaluating, model.train() after", kind="correctness",
                    severity="high", where=[where])
