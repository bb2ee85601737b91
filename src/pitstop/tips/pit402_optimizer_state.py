"""PIT402 optimizer-state: know what the optimizer keeps per parameter before blaming activations."""

from __future__ import annotations

from pitstop.catalog import Tip


class OptimizerState(Tip):
    code = "PIT402"
    slug = "optimizer-state"
    title = "Optimizer state memory: Adam/AdamW 2x params, RMSprop 1x, SGD 0x, SGD+momentum 1x"
    faces = "DB"
    seeds = ("001",)
    truth = (
        "Seed 001 lists Adam 2x, RMSprop 1x and SGD 0x the model size, but forgets that SGD with "
        "momentum keeps a momentum buffer (1x), and options change the count. Measured here "
        "(bytes of state tensors / bytes of parameters, a 2.1M-parameter fp32 MLP after one "
        "step, torch 2.13): SGD 0, SGD(momentum=0.9) 1.0, RMSprop 1.0, RMSprop(momentum=0.9) "
        "2.0, RMSprop(centered=True) 2.0, Adagrad 1.0, Adam and AdamW 2.0 (fused too), "
        "Adam(amsgrad=True) 3.0, plus a one-element `step` tensor per parameter for Adam, "
        "AdamW, RMSprop and Adagrad."
    )

    what = """
        At run time the doctor reports the measured memory breakdown of your training:
        parameters, gradients, optimizer state (summed over `optimizer.state`) and
        activations (the tensors autograd saves for backward), so you know which one to attack.
        `pitstop bench PIT402` measures the state of the common optimizers on this machine,
        like the ratios listed above.
    """
    why = """
        Before a single activation, training holds the parameters (1x), their gradients (1x)
        and the optimizer state (0x to 3x). With fp32 AdamW that is 4x the parameter bytes:
        16 bytes per parameter, 16 GB for a 1B-parameter model. Most optimizers create the
        state lazily at the first `optimizer.step()` (Adagrad at construction; checked), in
        the parameters' dtype and device, and keep it for the whole run; it does not depend
        on the batch size, so shrinking the batch does not touch it. The ZeRO paper counts
        16 bytes per parameter for mixed-precision Adam as well (fp16 weights and gradients
        plus fp32 master weights, momentum and variance).
    """
    example = """
        ```python
        optimizer = torch.optim.Adam(model.parameters(), amsgrad=True)   # 3x params of state
        # out of memory after the first step: the state did not exist before it
        ```
    """
    use_instead = """
        Measure first:
        ```python
        def state_bytes(optimizer):
            return sum(t.numel() * t.element_size()
                       for s in optimizer.state.values() for t in s.values()
                       if torch.is_tensor(t))
        ```
        Then, if the state is what does not fit: drop options that add state you do not need
        (`amsgrad`, `centered`, RMSprop momentum); shard it across data-parallel ranks
        (`torch.distributed.optim.ZeroRedundancyOptimizer`, or FSDP); or use an optimizer
        with less state, such as SGD with momentum (1x), after checking that it converges as
        well for your model.
    """
    when_not = """
        When activations dominate the peak (large batches, long sequences, big images),
        changing the optimizer buys little: see PIT401 and PIT406. For small models the
        state is small in absolute terms. An optimizer is chosen for how it trains, not for
        its memory: never switch for memory alone without comparing the loss curves.
    """
    references = (
        "PyTorch docs, torch.optim (per-algorithm state and options): https://pytorch.org/docs/stable/optim.html",
        "PyTorch docs, ZeroRedundancyOptimizer: https://pytorch.org/docs/stable/distributed.optim.html",
        "Kingma & Ba, Adam: A Method for Stochastic Optimization, 2014: https://arxiv.org/abs/1412.6980",
        "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, 2019: https://arxiv.org/abs/1910.02054",
        "Seed 001 (Optimizer step: Adam, RMSprop, SGD)",
    )


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Measurement, Outcome  # noqa: E402


def _state_bytes(optimizer) -> int:
    import torch

    return sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
               if torch.is_tensor(t))


class OptimizerStateBench(Benchmark, tip="PIT402"):
    title = "Optimizer state bytes per parameter byte after one step: SGD, SGD+momentum, RMSprop, Adam, AdamW"
    claim = Claim(
        seed="001",
        text="Adam: twice the model size (which uses two moments); RMSprop: one times the model size; "
             "SGD: zero times the model size",
        kind="exact",
        candidate="Adam",
        ratio=2.0,
        expected={"RMSprop": 1.0, "SGD": 0.0},
        ratio_of="bytes of Adam's state tensors / bytes of the parameters",
    )

    def run(self, ctx):
        import torch
        from torch import nn

        width = ctx.size(tiny=64, quick=256, full=1024)
        model = nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, width)).to(ctx.device)
        params = list(model.parameters())
        param_bytes = sum(p.numel() * p.element_size() for p in params)
        makers = {
            "SGD": lambda ps: torch.optim.SGD(ps, lr=0.01),
            "SGD(momentum=0.9)": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
            "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01),
            "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
            "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01),
        }
        x = torch.randn(8, width, device=ctx.device)
        measurements = []
        for name, make in makers.items():
            optimizer = make(params)
            before = _state_bytes(optimizer)
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            after = _state_bytes(optimizer)
            note = f"{before} B before the first step" if before else "no state before the first step"
            measurements.append(Measurement(name, (after,), unit="B", work=param_bytes, work_unit="param bytes",
                                            note=note))
            del optimizer
        n = sum(p.numel() for p in params)
        return Outcome(
            workload=f"MLP Linear({width}, {4 * width})-ReLU-Linear({4 * width}, {width}), {n:,} fp32 parameters "
                     f"({len(params)} tensors) on {ctx.device}; state = every tensor in optimizer.state after "
                     f"one step",
            measurements=measurements,
            notes=["The seed forgets SGD with momentum: its momentum buffer is one more model size. Adam, AdamW and "
                   "RMSprop also keep a one-element `step` tensor per parameter tensor (the tiny excess above "
                   "the whole numbers)."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, mib, pct  # noqa: E402
from pitstop.doctor.analysis.records import MemoryRecord, OptimizerRecord  # noqa: E402


#: The rule of thumb: optimizer state bytes per parameter byte, by class name, and the
#: options that add state. Measured on torch 2.13 (this tip's benchmark, the truth note).
OPTIMIZER_RULES = {
    "SGD": (0.0, "SGD 0x (1x with momentum)"),
    "Adam": (2.0, "Adam 2x (3x with amsgrad)"),
    "AdamW": (2.0, "AdamW 2x (3x with amsgrad)"),
    "RMSprop": (1.0, "RMSprop 1x (+1x momentum, +1x centered)"),
    "Adagrad": (1.0, "Adagrad 1x"),
}


def rule_for(name: str, options: dict) -> tuple[float | None, str]:
    """Expected state/param byte ratio for optimizer class ``name`` with first-group ``options``."""
    if name not in OPTIMIZER_RULES:
        return None, f"no rule of thumb for {name}"
    ratio, text = OPTIMIZER_RULES[name]
    if name == "SGD" and options.get("momentum", 0):
        ratio = 1.0
    if name in ("Adam", "AdamW") and options.get("amsgrad"):
        ratio = 3.0
    if name == "RMSprop":
        ratio = 1.0 + (1.0 if options.get("momentum", 0) else 0.0) + (1.0 if options.get("centered") else 0.0)
    return ratio, text


def _rule_text(o: OptimizerRecord) -> str:
    ratio, text = rule_for(o.cls, o.options)
    return f"rule of thumb {ratio if ratio is not None else '?'}x: {text}"


class OptimizerStateCheck(Check, tip="PIT402"):
    looks_at = "optimizer state bytes, measured from optimizer.state, against the rule of thumb"

    def check(self, obs, th):
        m = obs.memory or MemoryRecord()
        accounted = m.accounted
        state = m.optimizer_state or 0
        if not accounted or state / accounted < th.optimizer_state_share:
            return
        rows = "; ".join(
            f"{o.cls}: {mib(o.state_bytes)} = {o.state_ratio:.1f}x its parameters "
            f"({_rule_text(o)})"
            for o in obs.optimizers if o.state_ratio is not None)
        pressure = bool(m.pressure and m.pressure > th.memory_share)
        yield self.finding(
            th, title="Optimizer state is a large share of memory",
            evidence=f"optimizer state {mib(state)} is {pct(state / accounted)} of params+grads+state+activations; {rows}.",
            fix="drop options that add state (amsgrad, centered, momentum you do not need), or shard it "
                "(ZeroRedundancyOptimizer / FSDP)" + ("" if pressure else "; memory is not near capacity, so this is for information"),
            kind="memory", share=state / m.peak if m.peak else None, nbytes=state,
            severity="medium" if pressure else "low")


# --- memory fix face ---
from pitstop.doctor.analysis.fits import FixEstimate, MemoryFix  # noqa: E402


class OptimizerStateFix(MemoryFix, tip="PIT402"):
    """Less optimizer state: an option that adds state dropped (amsgrad, centered), SGD with
    momentum instead of Adam/AdamW (1x the parameters instead of 2x, the ratios measured in this
    tip's truth), or 8-bit Adam state (bitsandbytes: 2 bytes per parameter instead of 8).
    Computed from the state measured in ``optimizer.state`` at the peak."""

    title = "less optimizer state"

    def estimate(self, basis, obs, *, limit, need, oom):
        state = basis.optimizer_state
        for o in obs.optimizers:
            if not o.state_bytes or not state:
                continue
            share = min(1.0, o.state_bytes / state)
            mine = int(state * share)  # this optimizer's part of the state alive at the peak
            ratio = o.state_ratio or 0.0
            if o.cls in ("Adam", "AdamW") and o.options.get("amsgrad") and ratio > 2:
                drop = int(mine * (ratio - 2) / ratio)
                yield self._est(f"{o.cls} without amsgrad", drop, f"{o.cls}(amsgrad=True) keeps {ratio:.1f}x its "
                                f"parameters; without it 2x", f"{o.cls}(..., amsgrad=False)")
            if o.cls in ("Adam", "AdamW") and ratio >= 1.5:
                sgd = int(mine * (ratio - 1) / ratio)
                yield self._est("SGD with momentum instead of " + o.cls, sgd,
                                f"{o.cls} keeps {mib(o.state_bytes)} ({ratio:.1f}x its parameters); SGD(momentum) 1x",
                                "torch.optim.SGD(params, lr=..., momentum=0.9)",
                                caveat="another optimizer trains differently: compare the loss curves first")
                eight = int(mine * 0.75)
                yield self._est(f"8-bit {o.cls} state (bitsandbytes)", eight,
                                f"{mib(o.state_bytes)} of fp32 moments (8 bytes per parameter) held in 2 bytes per parameter",
                                f"bitsandbytes.optim.{o.cls}8bit(params, ...)",
                                caveat="CUDA only; quantized moments: compare the loss curves")

    def _est(self, title, saved, basis, fix, caveat=""):
        return FixEstimate(code=self.tip, title=title, fixed_saved=saved, how="computed",
                           basis=basis, time_cost=None, cost_basis="not measured here", fix=fix, caveat=caveat)
