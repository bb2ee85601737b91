"""After the script stopped: the memory profile's last facts (collect.py calls :func:`memory_profile`).

- the profiled step's samples and forwards (from the batch record of that step) and the
  repeated blocks' forward seconds per observed step (:meth:`MemWatch.result`);
- ``precision_saved``: how many bytes per sample one training forward of the model saves for
  backward under a 16-bit autocast, relative to what it saves per sample as it trains now,
  and ``precision_fixed``: what autocast saves whatever the batch (its 16-bit copies of the
  weights). Measured, not assumed: the model's forward runs (with gradients, no backward) on
  2 and 4 samples of the last training batch, as trained and per dtype, under a saved-tensor
  hook that adds up the distinct storages autograd keeps; the difference between the two
  sample counts is the per-sample part. The model itself is used (no copy: after an
  out-of-memory error there may be no room for one); the script has stopped, so changes to
  running statistics (BatchNorm) no longer matter, and the random state is restored.
  Skipped when the training already runs under autocast or its parameters are not fp32.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from pitstop.doctor.analysis.oom_records import MemoryProfile

__all__ = ["memory_profile", "precision_saved", "PRECISION_SAMPLES"]

#: samples of the last batch the precision measurement runs on (a ratio: few are enough)
PRECISION_SAMPLES = 4


def memory_profile(inst: Any, models: list, autocast: str | None) -> MemoryProfile | None:
    """The profiled step of ``inst`` with its batch, and the 16-bit measurement when it applies."""
    watch = getattr(inst.memory, "watch", None)
    if watch is None:
        return None
    model = models[0][0] if models else None
    samples = forwards = None
    if model is not None and watch.profile is not None:
        s, _, f = inst.per_step.get(watch.profile.step, {}).get(id(model), (0, 0, 0))
        samples, forwards = s or None, f or None
    observed = sum(1 for r in inst.records if r.kind == "observed")
    prof = watch.result(samples=samples, forwards=forwards, seconds_steps=observed)
    if prof is None:
        return None
    if model is not None and autocast is None:
        args = inst.last_train_args.get(id(model))
        kwargs = inst.last_train_kwargs.get(id(model)) or {}
        dim = inst.train_layout.get(id(model), 0) or 0
        if args is not None:
            try:
                ratios, fixed = precision_saved(model, args, kwargs, dim)
                prof = replace(prof, precision_saved=ratios, precision_fixed=fixed)
            except Exception as exc:  # never lose the profile over a measurement
                prof = replace(prof, notes=[*prof.notes, f"16-bit activations not measured: {type(exc).__name__}: {exc}"])
    return prof


def _slice(obj: Any, dim: int, n: int) -> Any:
    from torch.utils._pytree import tree_map

    def cut(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() > dim and t.shape[dim] > n:
            return t.narrow(dim, 0, n)
        return t
    return tree_map(cut, obj)


def _saved_bytes(model: Any, args: Any, kwargs: dict, dtype: torch.dtype | None, device: str) -> int:
    seen: dict[tuple[str, int], int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            st = t.untyped_storage()
            if st.data_ptr() not in params:
                seen[(str(t.device), st.data_ptr())] = st.nbytes()
        except Exception:
            pass
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if dtype is None:
            out = model(*args, **kwargs)
        else:
            with torch.autocast(device_type=device, dtype=dtype):
                out = model(*args, **kwargs)
    del out
    return sum(seen.values())


def precision_saved(model: Any, args: Any, kwargs: dict, dim: int = 0,
                    dtypes: tuple[str, ...] = ("bfloat16",)) -> tuple[dict[str, float], dict[str, int]]:
    """Per autocast dtype: (bytes saved per sample under it / bytes saved per sample now, extra
    bytes saved whatever the batch: the 16-bit copies of the weights autocast keeps for the
    backward). Two sample counts of the last batch separate the two (see the module docstring)."""
    p = next(model.parameters(), None)
    if p is None or p.dtype != torch.float32:
        return {}, {}
    device = p.device.type
    args = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    sizes = [t.shape[dim] for t in _tensor_leaves((args, kwargs)) if t.dim() > dim]
    n2 = min(max(sizes, default=0), PRECISION_SAMPLES)
    n1 = n2 // 2
    if n1 < 1:
        return {}, {}
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if device == "cuda" else None
    was_training = model.training
    model.train()
    try:
        def saved(n: int, dtype: torch.dtype | None) -> int:
            return _saved_bytes(model, _slice(args, dim, n), _slice(dict(kwargs), dim, n), dtype, device)

        base1, base2 = saved(n1, None), saved(n2, None)
        base_slope = (base2 - base1) / (n2 - n1)
        ratios, fixed = {}, {}
        for name in dtypes:
            if base_slope <= 0:
                continue
            low1, low2 = saved(n1, getattr(torch, name)), saved(n2, getattr(torch, name))
            slope = (low2 - low1) / (n2 - n1)
            ratios[name] = slope / base_slope
            fixed[name] = int((low2 - n2 * slope) - (base2 - n2 * base_slope))
        return ratios, fixed
    finally:
        model.train(was_training)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def _tensor_leaves(obj: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]
