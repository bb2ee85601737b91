"""PIT104 channels-last: run conv nets with memory_format=torch.channels_last (NHWC in memory)."""

from __future__ import annotations

from pitstop.catalog import Tip


class ChannelsLast(Tip):
    code = "PIT104"
    slug = "channels-last"
    title = "Conv net run in NCHW layout where channels_last is faster"
    faces = "DKEB"
    seeds = ("000",)
    truth = (
        "Seed 000's \"channel last\" remark is about the data pipeline (albumentations works "
        "on `[H, W, C]` NumPy images); it is not the `torch.channels_last` memory format, which "
        "keeps the logical `(N, C, H, W)` shape and only stores it as NHWC so cuDNN/oneDNN "
        "convolutions need no layout conversion. It helps convs, not MLPs/transformers. "
        "Measured here (2-core Xeon with AVX512-BF16/AMX, torch 2.13 CPU, three 3x3 convs "
        "with 64 channels + BatchNorm + ReLU, 56x56 images, batch 8, median of 30 steps): "
        "fp32 inference forward 1.46x faster (33.4 ms -> 22.9 ms), bf16-autocast inference "
        "forward 2.4x (11.0 ms -> 4.6 ms), but a whole fp32 training step only 1.09x (99.6 ms "
        "-> 91.6 ms). Repeated runs on this shared machine gave 1.3x-1.5x for the fp32 forward."
    )

    what = """
        Detects convolutional models that run in the default NCHW layout
        (`torch.contiguous_format`). While training runs, the doctor checks the memory format
        of the convolution weights and of the activations reaching them; `tune` converts the
        model and inputs to `channels_last` and measures the step A/B on your own training;
        `pitstop bench PIT104` times a conv net in both layouts on this machine.
    """
    why = """
        The fast convolution kernels of cuDNN (tensor cores) and oneDNN (AVX-512/AMX) work on
        channels-innermost (NHWC) data. Given NCHW tensors, PyTorch either picks a slower
        kernel or converts the layout around each convolution, which costs extra memory
        traffic per layer. With `channels_last` the weights and every activation stay NHWC
        from the first conv to the last; the shape is unchanged (only the strides differ), so
        the model code does not change.
    """
    example = """
        ```python
        model = torchvision.models.resnet50().to(device)
        for x, y in loader:                      # x: (N, C, H, W), NCHW in memory
            loss = loss_fn(model(x.to(device)), y.to(device))
            ...
        ```
    """
    use_instead = """
        ```python
        model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
        for x, y in loader:
            x = x.to(device, memory_format=torch.channels_last)  # same shape, NHWC strides
            loss = loss_fn(model(x), y.to(device))
            ...
        ```
        Combine it with bf16 autocast (PIT301): that is where the gain measured here was
        largest. After a `channels_last` conv, flatten with `torch.flatten` / `.reshape`, not
        `.view(n, -1)`, which raises on these strides (PIT107).
    """
    when_not = """
        Models without 4-D convolution activations gain nothing: MLPs and transformers work
        on 2-D/3-D tensors, `model.to(memory_format=torch.channels_last)` leaves their Linear
        weights untouched, and a 3-D tensor cannot be converted at all (PyTorch raises
        "required rank 4 tensor"). Ops without NHWC kernels (some custom or older ops)
        convert back and forth and can make it slower. The gain measured here was mostly in
        the inference forward pass (1.09x for a full fp32 training step), so measure on your
        model: `tune` does. It can slow a fused optimizer: on CPU a fused SGD step over the
        bundled conv net's channels_last parameters took 2.4x-2.7x as long as over contiguous
        ones, slightly slower than the for-loop (1.06x-1.09x; one thread,
        `benchmarks/fused_channels_last.py`).
    """
    references = (
        "PyTorch tutorial, Channels Last Memory Format in PyTorch: https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
        "PyTorch Performance Tuning Guide — Use channels_last memory format for computer vision models: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "NVIDIA Deep Learning Performance — Convolutional Layers User's Guide (tensor layouts): https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html",
        "Seed 000 (General Speed-Up Tricks: channel last)",
    )
    engine = "Recipe.channels_last converts the model (model.to(memory_format=torch.channels_last)) and every 4-D floating input batch before the step."


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402


class ChannelsLastBench(Benchmark, tip="PIT104"):
    title = "Conv net training step and inference forward: NCHW vs channels_last"
    claim = Claim(
        seed="000",
        text="sticking to the `[batch, H, W, Channels]` (channel last) could make data loading faster",
        baseline="NCHW step",
        candidate="channels_last step",
        ratio_of="median time of a training step (forward + backward) NCHW / channels_last",
    )

    def run(self, ctx):
        import contextlib

        import torch
        from torch import nn

        if ctx.cuda:
            # cuDNN's channels_last gain is in its tensor-core (16-bit) NHWC kernels, on a conv
            # stack big enough to be compute-bound: the CPU size (8x64x56x56, fp32) took 1.7 ms
            # per step on an H100 (1.11x, within noise). Both layouts under bf16 autocast.
            batch, hw, ch = ctx.size(tiny=(2, 16, 16), quick=(32, 56, 128), full=(64, 56, 128))
            half = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            precision = ("bf16" if half is torch.bfloat16 else "fp16") + " autocast (both layouts)"
        else:
            batch, hw = ctx.size(tiny=(2, 16), quick=(4, 28), full=(8, 56))
            ch, half, precision = 64, None, "fp32"

        def cast():
            return torch.autocast(ctx.device, dtype=half) if half is not None else contextlib.nullcontext()

        def convnet():
            torch.manual_seed(0)
            layers = []
            for _ in range(3):
                layers += [nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(inplace=True)]
            return nn.Sequential(*layers).to(ctx.device)

        fmt = {"NCHW": torch.contiguous_format, "channels_last": torch.channels_last}
        models = {k: convnet().to(memory_format=f) for k, f in fmt.items()}
        x = torch.randn(batch, ch, hw, hw, device=ctx.device)
        inputs = {k: x.contiguous(memory_format=f) for k, f in fmt.items()}

        def step(k):
            model = models[k]
            model.zero_grad(set_to_none=True)
            with cast():
                loss = model(inputs[k]).float().square().mean()
            loss.backward()

        evals = {k: convnet().to(memory_format=f).eval() for k, f in fmt.items()}  # BatchNorm: running stats

        def forward(k):
            with torch.inference_mode(), cast():
                return evals[k](inputs[k])

        variants = {f"{k} step": (lambda k=k: step(k)) for k in fmt}
        variants |= {f"{k} forward (eval)": (lambda k=k: forward(k)) for k in fmt}
        measured = ctx.time(variants)
        with cast():
            out = models["channels_last"](inputs["channels_last"])
        return Outcome(
            workload=f"3 x (Conv2d({ch}, {ch}, 3x3, no bias) + BatchNorm2d + ReLU), input {batch}x{ch}x{hw}x{hw} "
                     f"{precision} on {ctx.device}; step = forward + backward of a mean-square loss",
            measurements=measured,
            checks={"the channels_last model keeps its activations channels_last":
                    out.is_contiguous(memory_format=torch.channels_last)},
            comparisons=[Comparison("NCHW forward (eval)", "channels_last forward (eval)",
                                    "inference forward NCHW / channels_last")],
            notes=["The seed's sentence is about the NumPy layout albumentations works in; what PyTorch offers "
                   "for channel-last speed is the channels_last memory format of conv nets, measured here."],
        )


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402


class ChannelsLastCheck(Check, tip="PIT104"):
    looks_at = "memory format of the inputs reaching convolutions, with a channels_last probe"

    def skip_reason(self, obs):
        if not any(m.conv2d for m in obs.models):
            return "no Conv2d layers in the model"
        return super().skip_reason(obs)

    def check(self, obs, th):
        probe = obs.probe(ChannelsLastProbe.key())
        g = probe_gain(probe)
        if not obs.kernels.conv_nchw or g is None or g.low < th.probe_speedup:
            return
        # conservative: the interval's lower bound, on the forward+backward share only
        share = obs.compute_share * (1 - 1 / g.low)
        yield self.finding(
            th, title="Convolutions run in NCHW; channels_last measured faster here",
            evidence=f"{obs.kernels.conv_nchw} convolutions per step take NCHW inputs; probe: {probe.what} "
                     f"is {gain_text(g)} faster in channels_last; forward+backward are {pct(obs.compute_share)} "
                     f"of the step; {ESTIMATE_NOTE}.",
            fix="model.to(memory_format=torch.channels_last) and x.to(memory_format=torch.channels_last)",
            share=share, seconds=share * obs.mean_step)


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class ChannelsLastKnob(Knob, tip="PIT104"):
    """channels_last for the top-level model and its 4-D inputs.

    Script mode: right before the model's first training forward, the model is converted in
    place (``model.to(memory_format=torch.channels_last)``: the parameters keep their
    identity, so the optimizer still holds them) and its forward converts every 4-D floating
    input to channels_last.
    """

    name = "channels-last"
    title = "channels_last memory format"
    order = 10

    def applies(self, ctx):
        if not ctx.conv2d:
            return Applicability(False, "no Conv2d layer: channels_last only changes how convolutions read memory")
        if ctx.input_dims is not None and ctx.input_dims != 4:
            return Applicability(False, f"the model's inputs are {ctx.input_dims}-D, not 4-D images")
        return Applicability(True)

    def label(self, value):
        return "channels_last"

    def phases(self, value, ctx):
        return ("forward", "backward", "eval")  # the model's convolutions, wherever they run

    def recipe_fields(self, value, ctx):
        return {"channels_last": True}

    def apply_in_child(self, value, **options):
        import torch

        from pitstop.tune.patch import map_tensors, on_model, wrap_forward

        def to_cl(t):
            if t.dim() == 4 and t.is_floating_point():
                return t.contiguous(memory_format=torch.channels_last)
            return t

        def convert(model):
            model.to(memory_format=torch.channels_last)

            def wrapper(forward):
                def channels_last_forward(*args, **kwargs):
                    return forward(*map_tensors(args, to_cl), **map_tensors(kwargs, to_cl))
                return channels_last_forward

            wrap_forward(model, wrapper)

        on_model(convert, order=self.order)

    def snippet(self, value, ctx):
        return """
            model = model.to(memory_format=torch.channels_last)
            ...
            x = x.to(memory_format=torch.channels_last)   # every 4-D input batch
        """
# --- doctor probe face ---
from pitstop.doctor.analysis.probe import ESTIMATE_NOTE, Probe, gain_text, probe_gain  # noqa: E402


class ChannelsLastProbe(Probe, tip="PIT104"):
    """Forward+backward of a copy of the model in NCHW vs channels_last (model and input),
    under the autocast dtype the training used, on the last training batch."""

    name = "channels_last"

    def skip_reason(self, obs):
        if obs.model is None or not obs.model.conv2d:
            return "no Conv2d layers in the model"
        if obs.kernels.conv_channels_last:
            return "convolutions already take channels_last inputs"
        return None

    def run(self, ctx):
        import torch

        used = ctx.obs.autocast_dtype or "none"
        dtype = getattr(torch, used) if used != "none" else None
        cl = torch.channels_last
        base, base_batch = ctx.model_copy(), ctx.batch()
        fast, fast_batch = ctx.model_copy(memory_format=cl), ctx.batch(memory_format=cl)
        what = ctx.describe(base, base_batch) + (f" under {used} autocast" if dtype is not None else "")
        yield self.name, ctx.compare(what=what, baseline="nchw",
                                     variants={"nchw": ctx.fwd_bwd(base, base_batch, autocast=dtype),
                                               "channels_last": ctx.fwd_bwd(fast, fast_batch, autocast=dtype)})
