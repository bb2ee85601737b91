"""Build the knobs' :class:`~pitstop.tune.knob.Context` from the doctor's observations (torch-free).

Script mode runs the script once under the doctor in full mode for a couple of steps (the
*survey*); its :class:`pitstop.doctor.Observations` (as a dict) say what the training is:
device, model structure (Conv2d count), the shape of the model's inputs, the optimizer's
class and implementation, the training DataLoader's settings, autocast already in use,
backend flags. Knobs decide from that whether they apply.
"""

from __future__ import annotations

import os
from typing import Any

from pitstop.tune.knob import Context

__all__ = ["context_from_observations", "machine_load", "usable_cores"]


def _input_dims(obs: dict[str, Any]) -> int | None:
    shapes = (obs.get("kernels") or {}).get("conv_input_shapes") or {}
    if not shapes:
        return None
    shape = max(shapes.items(), key=lambda kv: kv[1])[0]
    return len(str(shape).split("x"))


def _autocast(obs: dict[str, Any]) -> str | None:
    counts = (obs.get("forwards") or {}).get("autocast") or {}
    used = {k: v for k, v in counts.items() if k != "none" and v}
    return max(used, key=used.get) if used else None


def _phase_shares(obs: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    parts = {k: float(v) for k, v in (obs.get("breakdown") or {}).items() if isinstance(v, (int, float)) and v >= 0}
    total = sum(parts.values())
    return tuple((k, v / total) for k, v in parts.items()) if total > 0 else ()


def context_from_observations(obs: dict[str, Any], *, notes: tuple[str, ...] = ()) -> Context:
    models = obs.get("models") or []
    opts = obs.get("optimizers") or []
    train = [d for d in obs.get("loaders") or [] if d.get("role") == "train"]
    settings = obs.get("settings") or {}
    cap = obs.get("capability")
    opt = opts[0] if opts else {}
    loader = train[0] if train else {}
    return Context(
        mode="script",
        device=obs.get("device") or "cpu",
        device_name=obs.get("device_name") or "",
        capability=tuple(cap) if cap else None,
        cpu_count=usable_cores(),
        conv2d=sum(int(m.get("conv2d") or 0) for m in models),
        input_dims=_input_dims(obs),
        autocast=_autocast(obs),
        compiled=bool((obs.get("compile") or {}).get("compiled")) or any(m.get("compiled") for m in models),
        optimizer=opt.get("class"),
        optimizer_mode=opt.get("mode"),
        fused_available=bool(opt.get("fused_available")),
        loader_workers=loader.get("num_workers") if train else None,
        pin_memory=loader.get("pin_memory") if train else None,
        persistent_workers=loader.get("persistent_workers") if train else None,
        batch_size=obs.get("batch_size"),
        cudnn_benchmark=bool(settings.get("cudnn_benchmark")),
        float32_matmul_precision=settings.get("float32_matmul_precision") or "highest",
        framework=(obs.get("framework") or {}).get("name"),
        phase_shares=_phase_shares(obs),
        notes=notes,
    )


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_load() -> tuple[float, int] | None:
    """(1-minute load average, usable cores), or None where the OS does not say."""
    try:
        return os.getloadavg()[0], usable_cores()
    except (OSError, AttributeError):
        return None
