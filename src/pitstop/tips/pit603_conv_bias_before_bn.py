"""PIT603 conv-bias-before-bn: a convolution bias right before BatchNorm is cancelled; drop it."""

from __future__ import annotations

from pitstop.catalog import Tip


class ConvBiasBeforeBn(Tip):
    code = "PIT603"
    slug = "conv-bias-before-bn"
    title = "Conv(bias=True) directly followed by BatchNorm: the bias is cancelled"
    faces = "LD"
    seeds = ("003",)
    truth = (
        "Seed 003 is right, and the lint offers `bias=False` as a fix in `nn.Sequential` "
        "literals and modules, marked unsafe because the state-dict loses the `.bias` keys. The "
        "speed gain is small: a training step of 3x (Conv2d(64, 64, 3)+BatchNorm2d+ReLU), input "
        "16x64x32x32, measured 91.4 ms with the biases and 90.3 ms without (about 1%, within "
        "noise; one thread, CPU time, 2-core Xeon). The biases are dead weight: their gradient "
        "measured ~4e-9 against ~8e-4 for the conv weights."
    )

    what = """
        Flags, in an `nn.Sequential(...)` literal, an `nn.ConvNd(...)` with a bias (no `bias=`
        argument, or a literal `bias=True`) immediately followed by `nn.BatchNormNd(...)`; and in
        a Module, `self.<bn>(self.<conv>(…))` where `__init__` binds those names to such a ConvNd
        and a BatchNormNd. `bias=<variable>` is not flagged (the lint cannot know its value), nor
        are unit tests, deliberate dummy models, and projects that load trained or ported weights
        into their models (`from_pretrained`, `load_state_dict(..., strict=False)`, a `pretrained`
        option, a state-dict converter, or a file saying it was modified from a URL): there the
        bias is part of what the weights compute. Reported at the conv constructor, with a fix
        `bias=False` that changes the state_dict layout: it is applied only with `--unsafe-fixes`,
        never counted among the fixes offered, and its message says what silently breaks (a
        `strict=False` load drops the trained bias and outputs change with no error). At run time the
        doctor looks for convolutions with a bias whose output goes straight into a BatchNorm.
    """
    why = """
        In training mode BatchNorm subtracts each channel's batch mean. A conv bias adds the same
        constant to every value of its channel, so it moves the mean by exactly that constant and
        is subtracted right back: the output does not depend on it, its gradient is zero, and
        BatchNorm's own shift (β) plays its role. It still costs an add over the whole conv output
        in forward, a reduction in backward, and a parameter with optimizer state per channel.
    """
    example = """
        ```python
        block = nn.Sequential(
            nn.Conv2d(64, 128, 3, padding=1),   # bias=True by default
            nn.BatchNorm2d(128),
            nn.ReLU(),
        )
        ```
    """
    use_instead = """
        ```python
        block = nn.Sequential(
            nn.Conv2d(64, 128, 3, padding=1, bias=False),
            nn.BatchNorm2d(128),
            nn.ReLU(),
        )
        ```
        torchvision's models are already built this way. To reuse a checkpoint trained with the
        biases, do not just drop them: BatchNorm's `running_mean` was collected with the bias
        included, so subtract each conv bias from the following `running_mean`, then load.
    """
    when_not = """
        Only a normalization that subtracts a per-channel mean cancels the bias: BatchNorm (and
        InstanceNorm). GroupNorm and LayerNorm average over several channels and cancel only the
        mean of their biases; an activation in between (Conv -> ReLU -> BN) cancels nothing. The
        speed gain is small (about 1% measured here); the change is worth making in new models,
        less so in models whose pretrained checkpoints carry the biases.
    """
    references = (
        "PyTorch Performance Tuning Guide — Disable bias for convolutions directly followed by a batch norm: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "Ioffe & Szegedy, Batch Normalization, ICML 2015 (section 3.2: the bias \"can be ignored\"): https://arxiv.org/abs/1502.03167",
        "Seed 003 (no bias in a convolution before batch normalization)",
    )


# --- lint face ---
from pitstop.lint.rule import UNSAFE, LintRule, cst, nodes

_CONVS = frozenset({"torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d"})
_BNS = frozenset({"torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d"})


#: what the fix breaks (issue 42: "state-dict keys change" understated it)
_LAYOUT = ("Set bias=False: this changes the state_dict layout (the conv's bias key goes); a checkpoint saved "
           "before no longer loads with strict=True, and a strict=False load silently drops its trained bias, so "
           "outputs change with no error: retrain, or subtract the bias from the BatchNorm's running_mean first")


class ConvBiasBeforeBnRule(LintRule, tip="PIT603"):
    runs = "step"  # paid every step wherever the reported line is
    message = "conv bias directly followed by BatchNorm: the BN mean subtraction cancels it; use bias=False"
    in_tests = False
    dummy_models = False
    fix = UNSAFE

    def __init__(self, ctx):
        super().__init__(ctx)
        self.classes = []  # per ClassDef: {"convs": {attr: call}, "bns": set, "pairs": [(bn, conv)]}

    def _conv_with_bias(self, call):
        if self.ctx.call_name(call) not in _CONVS:
            return False
        bias = nodes.arg(call, "bias", 7)
        if bias is not None:  # bias=<variable> may well be False (timm's conv_bias): only a literal True counts
            return nodes.is_true(bias.value)
        return not nodes.has_star_args(call)

    def _report(self, call):
        ctx = self.ctx
        if ctx.project.pretrained(ctx.path) if ctx.project is not None else ctx.info.pretrained:
            return  # a model that loads trained (or ported) weights: their conv biases are part of what it computes
        bias = nodes.arg(call, "bias", 7)
        fix = None
        if bias is None:
            fix = ctx.fix(UNSAFE, _LAYOUT, (call, nodes.with_kwarg(call, "bias", "False")), layout=True)
        elif nodes.is_true(bias.value):
            fix = ctx.fix(UNSAFE, _LAYOUT, (bias.value, "False"), layout=True)
        self.report(call, fix=fix)

    def visit_Call(self, node):
        ctx = self.ctx
        q = ctx.call_name(node)
        if q == "torch.nn.Sequential":
            args = node.args
            for a, b in zip(args, args[1:]):
                if a.star or b.star or a.keyword or b.keyword:
                    continue
                if self._conv_with_bias(a.value) and ctx.call_name(b.value) in _BNS:
                    self._report(a.value)
        elif self.classes and len(node.args) >= 1 and _self_attr(node.func):
            inner = node.args[0].value
            if isinstance(inner, cst.Call) and _self_attr(inner.func):
                self.classes[-1]["pairs"].append((node.func.attr.value, inner.func.attr.value))

    def visit_ClassDef(self, node):
        self.classes.append({"convs": {}, "bns": set(), "pairs": []})

    def leave_ClassDef(self, node):
        info = self.classes.pop()
        done = set()
        for bn, conv in info["pairs"]:
            call = info["convs"].get(conv)
            if bn in info["bns"] and call is not None and conv not in done:
                done.add(conv)
                self._report(call)

    def visit_Assign(self, node):
        ctx = self.ctx
        fn = ctx.current_function()
        if not self.classes or fn is None or fn.name.value != "__init__" or len(node.targets) != 1:
            return
        target = node.targets[0].target
        if not _self_attr(target) or not isinstance(node.value, cst.Call):
            return
        q = ctx.call_name(node.value)
        if q in _BNS:
            self.classes[-1]["bns"].add(target.attr.value)
        elif self._conv_with_bias(node.value):
            self.classes[-1]["convs"][target.attr.value] = node.value


def _self_attr(node):
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class ConvBiasBeforeBNCheck(Check, tip="PIT603"):
    looks_at = "convolutions with a bias whose output goes straight into BatchNorm"

    def check(self, obs, th):
        pairs = [p for m in obs.models for p in m.conv_bias_bn]
        if pairs:
            listing = ", ".join(f"{a} -> {b}" for a, b in pairs[:6])
            yield self.finding(
                th, title="Convolution bias right before BatchNorm is wasted",
                evidence=f"{len(pairs)} Conv->BatchNorm pairs with a conv bias ({listing}): BatchNorm subtracts "
                         "the batch mean, which cancels the bias; its parameters, gradients and updates are wasted.",
                fix="nn.Conv2d(..., bias=False) before BatchNorm", severity="low")
