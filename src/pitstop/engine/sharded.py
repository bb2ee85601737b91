"""FSDP2 for the engine: ``Recipe(strategy="fsdp2")`` (PIT705, PIT706).

Nothing home-made: ``torch.distributed.fsdp.fully_shard`` shards each unit's parameters over
the ranks (dim 0, one shard per rank), all-gathers them before the unit's forward and backward
and reduce-scatters its gradients after backward; the optimizer then holds the state of this
rank's shards only. :func:`shard_model` applies it the way PyTorch's FSDP2 tutorial and
torchtitan do:

- one unit per block (the children of the model's largest ``nn.ModuleList``, or of its root
  ``nn.Sequential``; ``Recipe.shard_units`` names them instead), then the root: a block's
  all-gather then overlaps the previous block's compute (one unit at the root alone gathers
  every parameter before the first layer runs, PIT705);
- ``MixedPrecisionPolicy`` from the recipe's precision: ``bf16-mixed`` gathers and computes in
  bf16 (half the all-gather bytes) and reduces gradients in fp32; the sharded parameters and
  the optimizer stay fp32;
- ``reshard_after_forward`` on every block but the last (its parameters are needed again at
  once by backward); ``Recipe.reshard_after_forward=False`` keeps every block gathered from
  forward to backward (no second all-gather, more memory);
- ``Recipe.shard_prefetch``: explicit prefetch, block ``i`` issues block ``i+1``'s all-gather
  in forward and block ``i-1``'s in backward.

``fully_shard`` replaces the parameters with new ``DTensor`` parameters, so an optimizer built
on the model before is rebuilt on them (:func:`rebuild_optimizer`, same class, groups and
hyper-parameters; it must not hold state yet).
"""

from __future__ import annotations

import fnmatch
import inspect
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["ShardPlan", "shard_blocks", "shard_model", "rebuild_optimizer", "mixed_precision_policy", "is_sharded",
           "units_of", "fsdp2_settings"]


@dataclass(frozen=True)
class ShardPlan:
    """What :func:`shard_model` did: the units (qualified names, root ``""`` last), the
    blocks resharded after forward, the all-gather dtype, explicit prefetch."""

    units: tuple[str, ...]
    resharded: tuple[str, ...]
    param_dtype: str
    prefetch: bool
    world_size: int


def is_sharded(model: nn.Module) -> bool:
    """The module (or a submodule) went through ``fully_shard``."""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def shard_blocks(model: nn.Module, patterns: tuple[str, ...] = ()) -> list[str]:
    """The qualified names of the submodules that become units (root excluded), in forward
    order. ``patterns``: ``fnmatch`` patterns of names (outermost matches win); empty: the
    children of the ``nn.ModuleList`` holding the most parameters, else of the root when it
    is an ``nn.Sequential``, else the root's children that hold parameters."""
    named = dict(model.named_modules())
    if patterns:
        chosen: list[str] = []
        for name in named:
            if name and any(fnmatch.fnmatchcase(name, p) for p in patterns) and \
                    not any(name.startswith(c + ".") for c in chosen):
                chosen.append(name)
        if not chosen:
            raise ValueError(f"Recipe.shard_units={list(patterns)!r} matches no submodule of {type(model).__name__}")
        return chosen
    lists = [(name, m) for name, m in named.items() if isinstance(m, nn.ModuleList) and len(m) > 1]
    if lists:
        name, best = max(lists, key=lambda nm: _params(nm[1]))
        if _params(best):
            prefix = f"{name}." if name else ""
            return [f"{prefix}{i}" for i, child in enumerate(best) if _params(child)]
    return [name for name, child in model.named_children() if _params(child)]


def mixed_precision_policy(precision: str):
    """The ``MixedPrecisionPolicy`` of a recipe precision (None: gather and reduce as stored)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16-mixed":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return None


def shard_model(model: nn.Module, device: torch.device, *, precision: str = "fp32", units: tuple[str, ...] = (),
                reshard_after_forward: bool = True, prefetch: bool = False) -> ShardPlan:
    """Apply ``fully_shard`` per block and at the root, in place (see the module docs).
    Needs an initialized process group (``pitstop.engine.init_distributed()`` under torchrun)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("Recipe(strategy='fsdp2') needs torch.distributed: call pitstop.engine.init_distributed() "
                           "at the top of the script and launch it with torchrun")
    if precision == "fp16-mixed":
        raise ValueError("Recipe(strategy='fsdp2') with precision='fp16-mixed' is not supported by pitstop's engine "
                         "(GradScaler on sharded gradients); use 'bf16-mixed'")
    if is_sharded(model):
        raise ValueError("the model already went through fully_shard: pass the plain module with "
                         "Recipe(strategy='fsdp2'), or your sharded module with the default strategy")
    world = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))
    policy = mixed_precision_policy(precision)
    extra = {"mp_policy": policy} if policy is not None else {}
    names = shard_blocks(model, units)
    named = dict(model.named_modules())
    blocks = [named[n] for n in names]
    resharded = []
    for i, block in enumerate(blocks):
        reshard = reshard_after_forward and i < len(blocks) - 1
        if reshard:
            resharded.append(names[i])
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, **extra)
    fully_shard(model, mesh=mesh, **extra)
    if prefetch and len(blocks) > 1:
        for i, block in enumerate(blocks):
            if i + 1 < len(blocks):
                block.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                block.set_modules_to_backward_prefetch([blocks[i - 1]])
    dtype = "bfloat16" if policy is not None else str(next(model.parameters()).dtype).replace("torch.", "")
    return ShardPlan(units=(*names, ""), resharded=tuple(resharded), param_dtype=dtype, prefetch=prefetch,
                     world_size=world)


def rebuild_optimizer(optimizer: torch.optim.Optimizer, before: dict[int, str], model: nn.Module) -> torch.optim.Optimizer:
    """The same optimizer (class, groups, hyper-parameters) on the sharded parameters.
    ``before``: ``id(parameter) -> qualified name`` taken before ``fully_shard``."""
    if optimizer.state:
        raise ValueError("Recipe(strategy='fsdp2') needs an optimizer that has not stepped yet: its state would be "
                         "for the unsharded parameters")
    after = dict(model.named_parameters(remove_duplicate=False))
    groups = []
    for g in optimizer.param_groups:
        params = []
        for p in g["params"]:
            name = before.get(id(p))
            if name is None or name not in after:
                raise ValueError("Recipe(strategy='fsdp2'): the optimizer holds a parameter that is not the model's "
                                 f"({tuple(p.shape)}); build it on model.parameters()")
            params.append(after[name])
        groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": params})
    cls = type(optimizer)
    accepted = inspect.signature(cls.__init__).parameters
    return cls(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})


def units_of(model: nn.Module) -> list[nn.Module]:
    """The FSDP2 units below ``model`` (not the root), in registration order."""
    from torch.distributed.fsdp import FSDPModule

    return [m for name, m in model.named_modules() if name and isinstance(m, FSDPModule)]


def fsdp2_settings(model: nn.Module, value: str) -> None:
    """Change the settings of a model sharded already (``tune``'s PIT705 knob, before its first
    training forward): ``"prefetch"``: each unit issues the next one's all-gather in forward and
    the previous one's in backward; ``"keep-gathered"``: every unit keeps its parameters gathered
    from forward to backward (``set_reshard_after_forward(False)``)."""
    blocks = units_of(model)
    if not blocks:
        raise ValueError("the model has no FSDP2 unit below its root (fully_shard per block first)")
    if value == "prefetch":
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    elif value == "keep-gathered":
        model.set_reshard_after_forward(False)  # recurse: every unit
    else:
        raise ValueError(f"unknown FSDP2 setting {value!r}")
