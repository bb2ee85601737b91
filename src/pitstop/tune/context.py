"""Build the knobs' :class:`~pitstop.tune.knob.Context` from the doctor's observations (torch-free).

Script mode runs the script once under the doctor in full mode for a couple of steps (the
*survey*); its :class:`pitstop.doctor.Observations` say what the training is:
device, model structure (Conv2d count), the shape of the model's inputs, the optimizer's
class and implementation, the training DataLoader's settings, autocast already in use,
backend flags. Knobs decide from that whether they apply.
"""

from __future__ import annotations

from typing import Any

from pitstop.doctor.analysis.observations import Observations
from pitstop.machine import machine_load, usable_cores
from pitstop.tune.knob import Context

__all__ = ["context_from_observations", "machine_load", "usable_cores"]


def _input_dims(obs: Observations) -> int | None:
    shapes = obs.kernels.conv_input_shapes
    if not shapes:
        return None
    shape = max(shapes.items(), key=lambda kv: kv[1])[0]
    return len(str(shape).split("x"))


def _strategy(obs: Observations) -> str | None:
    """``"fsdp2"`` / ``"fsdp1"`` (a sharded model), ``"ddp"``, or None (no data parallelism seen)."""
    d = obs.distributed
    shard = d.ranks[0].shard if d is not None and d.ranks else None
    if shard is not None:
        return shard.framework
    return "ddp" if any(m.ddp for m in obs.models) else None


def context_from_observations(obs: Observations | dict[str, Any], *, notes: tuple[str, ...] = ()) -> Context:
    """The knobs' context from the survey's observations (an :class:`Observations`, or its
    ``to_dict()`` as the doctor's child wrote it)."""
    if not isinstance(obs, Observations):
        obs = Observations.from_dict(obs)
    opt, loader = obs.optimizer, obs.train_loader
    return Context(
        mode="script",
        device=obs.device or "cpu",
        device_name=obs.device_name or "",
        capability=tuple(obs.capability) if obs.capability else None,
        cpu_count=obs.usable_cores or usable_cores(),  # the survey's affinity mask, else this process's
        num_threads=obs.settings.num_threads,
        conv2d=sum(m.conv2d for m in obs.models),
        input_dims=_input_dims(obs),
        autocast=obs.autocast_dtype,
        compiled=obs.compiled,
        recompiles=obs.compile.recompile_count if obs.compile else 0,
        recompile_limit_hit=bool(obs.compile and obs.compile.limit_hits),
        static_shapes=bool(obs.compile and obs.compile.static),
        optimizer=opt.cls if opt else None,
        optimizer_mode=opt.mode if opt else None,
        fused_available=bool(opt and opt.fused_available),
        loader_workers=loader.num_workers if loader else None,
        pin_memory=loader.pin_memory if loader else None,
        persistent_workers=loader.persistent_workers if loader else None,
        batch_size=obs.batch_size,
        cudnn_benchmark=obs.settings.cudnn_benchmark,
        float32_matmul_precision=obs.settings.float32_matmul_precision or "highest",
        framework=obs.framework_name,
        strategy=_strategy(obs),
        world_size=obs.settings.world_size or 1,
        phase_shares=tuple(obs.breakdown.shares().items()) if obs.breakdown else (),
        step_boundary=obs.step_boundary,
        backward_calls=obs.backward_calls,
        scaler_calls=obs.scaler_calls,
        blocks=(obs.memory_profile.blocks_pattern,) if obs.memory_profile and obs.memory_profile.blocks_pattern else (),
        notes=notes,
    )
