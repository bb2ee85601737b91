"""Quick hardware probes: measure a trick on this machine before recommending it.

Each probe times two variants of the same work, interleaved, for about a second (three
warm-up calls and at least six timed runs each; the fastest run counts), on a deep copy of
the user's model and up to 16 samples of the last training batch it saw (the user's model, optimizer and RNG state are
left untouched):

- ``precision``: forward+backward in fp32 vs under bf16 autocast (fp16 on GPUs without
  bf16) -- PIT301;
- ``channels_last``: forward+backward NCHW vs channels_last model and input -- PIT104;
- ``optimizer``: one ``step()`` of the same optimizer class in for-loop vs foreach vs
  fused mode on tensors shaped like its parameters -- PIT501.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["time_variants", "precision_probe", "channels_last_probe", "optimizer_probe"]

#: parameters larger than this are not deep-copied for a probe (memory), in bytes.
MAX_PROBE_BYTES = 512 * 2**20


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_variants(variants: dict[str, Callable[[], Any]], device: str, budget_s: float = 1.0,
                  min_reps: int = 6, max_reps: int = 50, warmup: int = 3) -> dict[str, float]:
    """Fastest time of each callable over interleaved runs, after ``warmup`` calls each
    (oneDNN's bf16 kernels on this CPU need several calls before they reach speed).

    The minimum, as ``timeit`` recommends: on a machine shared with other work,
    interference only ever adds time, so the fastest run is the best estimate of the cost.
    """
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    _sync(device)
    times: dict[str, list[float]] = {k: [] for k in variants}
    start = time.perf_counter()
    reps = 0
    while reps < max_reps and (reps < min_reps or time.perf_counter() - start < budget_s):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
        reps += 1
    return {k: min(v) for k, v in times.items()}


def _scalar(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out.float().mean()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                return o.float().mean()
    raise TypeError(f"cannot reduce a model output of type {type(out).__name__} to a scalar")


def _param_size(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _fwd_bwd(model: torch.nn.Module, args: tuple, autocast: tuple[str, torch.dtype] | None) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        if autocast is None:
            out = model(*args)
        else:
            with torch.autocast(autocast[0], dtype=autocast[1]):
                out = model(*args)
        _scalar(out).backward()
    return run


#: probes run on at most this many samples of the last batch (enough for the kernels'
#: relative speed, short enough for several timed runs of each variant).
PROBE_SAMPLES = 16


def _slice(args: tuple, n: int = PROBE_SAMPLES) -> tuple:
    """The first ``n`` samples of every tensor argument that shares the batch dimension."""
    first = next((a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0), None)
    if first is None or first.shape[0] <= n:
        return args
    b = first.shape[0]
    return tuple(a[:n] if isinstance(a, torch.Tensor) and a.dim() > 0 and a.shape[0] == b else a for a in args)


def _describe(model: torch.nn.Module, args: tuple) -> str:
    shapes = ", ".join("x".join(map(str, a.shape)) for a in args if isinstance(a, torch.Tensor))
    return f"forward+backward of {type(model).__name__} on {shapes} from the last training batch"


def precision_probe(model: torch.nn.Module, args: tuple, device: str, budget_s: float = 1.0) -> dict[str, Any]:
    if _param_size(model) > MAX_PROBE_BYTES:
        return {"skipped": "model too large to copy for a probe"}
    args = _slice(args)
    if device == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        dtype = torch.bfloat16
    with torch.random.fork_rng(devices=[]):
        ref = copy.deepcopy(model).train()
        t = time_variants({"fp32": _fwd_bwd(ref, args, None),
                           "autocast": _fwd_bwd(ref, args, (device, dtype))}, device, budget_s)
    return {"what": _describe(model, args), "dtype": str(dtype).replace("torch.", ""),
            "fp32_s": t["fp32"], "autocast_s": t["autocast"], "speedup": t["fp32"] / t["autocast"]}


def channels_last_probe(model: torch.nn.Module, args: tuple, device: str, autocast_dtype: str | None,
                        budget_s: float = 1.0) -> dict[str, Any]:
    if _param_size(model) > MAX_PROBE_BYTES:
        return {"skipped": "model too large to copy for a probe"}
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 4:
        return {"skipped": "the model's first input is not a 4-D image batch"}
    args = _slice(args)
    ac = (device, getattr(torch, autocast_dtype)) if autocast_dtype not in (None, "none") else None
    with torch.random.fork_rng(devices=[]):
        base = copy.deepcopy(model).train()
        cl = copy.deepcopy(model).train().to(memory_format=torch.channels_last)
        cl_args = (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
        t = time_variants({"nchw": _fwd_bwd(base, args, ac), "channels_last": _fwd_bwd(cl, cl_args, ac)},
                          device, budget_s)
    return {"what": _describe(model, args) + (f" under {autocast_dtype} autocast" if ac else ""),
            "nchw_s": t["nchw"], "channels_last_s": t["channels_last"], "speedup": t["nchw"] / t["channels_last"]}


def _modes_available(cls: type) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    modes = ["for-loop"]
    if "foreach" in params:
        modes.append("foreach")
    if "fused" in params:
        modes.append("fused")
    return modes


def optimizer_probe(optimizer: torch.optim.Optimizer, budget_s: float = 1.0) -> dict[str, Any]:
    """Time one step of ``type(optimizer)`` in each available mode, same hyper-parameters."""
    cls = type(optimizer)
    params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
    if not params:
        return {"skipped": "the optimizer holds no trainable parameters"}
    if sum(p.numel() * p.element_size() for p in params) > MAX_PROBE_BYTES:
        return {"skipped": "parameters too large to copy for a probe"}
    device = params[0].device.type
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in optimizer.defaults.items()
                if k in accepted and k not in ("foreach", "fused", "differentiable", "capturable")}
    variants: dict[str, Callable[[], None]] = {}
    with torch.random.fork_rng(devices=[]):
        for mode in _modes_available(cls):
            clones = [torch.zeros_like(p, requires_grad=True) for p in params]
            for c in clones:
                c.grad = torch.randn_like(c) * 1e-3
            kw = dict(defaults)
            kw["foreach"] = mode == "foreach"
            if mode == "fused":
                kw["fused"] = True
                kw.pop("foreach")
            try:
                opt = cls(clones, **kw)
                opt.step()  # creates the state (lazy), checks the mode is supported here
            except Exception as exc:  # e.g. fused not implemented for this device/dtype
                if mode == "for-loop":
                    return {"skipped": f"could not rebuild {cls.__name__}: {exc}"}
                continue
            variants[mode] = opt.step
        t = time_variants(variants, device, budget_s)
    fastest = min(t, key=t.get)
    return {"what": f"{cls.__name__}.step() over {len(params)} parameter tensors "
                    f"({sum(p.numel() for p in params):,} elements) on {device}",
            "seconds": t, "fastest": fastest, "speedup_vs_for_loop": t["for-loop"] / t[fastest]}
