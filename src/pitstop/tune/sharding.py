"""Child-process helpers of the sharding knobs (PIT705, PIT706) for an unmodified torchrun script.

- :func:`ddp_as_fsdp2`: every ``DistributedDataParallel(module, ...)`` the script builds
  afterwards returns ``module`` itself, sharded by FSDP2 as pitstop's engine does
  (:func:`pitstop.engine.sharded.shard_model`: one unit per block, then the root), so the
  optimizer the script builds next from ``model.parameters()`` holds the shards. The module
  keeps what scripts use of a DDP wrapper: ``model.module`` (the module itself) and
  ``model.no_sync()`` (``set_requires_gradient_sync(False)`` inside the block).
- :func:`fsdp2_settings`: the FSDP2 settings of a model the script sharded itself, changed just
  before its first training forward: explicit prefetch of the next block (forward) and of the
  previous one (backward), or every unit kept gathered after forward.

Torch is imported inside the functions (tip modules call them from ``apply_in_child``).
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["ddp_as_fsdp2", "fsdp2_settings", "units_of"]


def units_of(model: Any) -> list[Any]:
    """The FSDP2 units below ``model`` (not the root), in registration order."""
    from torch.distributed.fsdp import FSDPModule

    return [m for name, m in model.named_modules() if name and isinstance(m, FSDPModule)]


def _no_sync(module: Any):
    @contextlib.contextmanager
    def no_sync():
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
    return no_sync


def ddp_as_fsdp2(*, reshard_after_forward: bool = True, prefetch: bool = False) -> None:
    """From now on ``DistributedDataParallel(module, ...)`` shards ``module`` with FSDP2 and
    returns it (see the module docs)."""
    from torch.nn.parallel import DistributedDataParallel

    from pitstop.engine.sharded import shard_model

    def __new__(cls: type, module: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is not DistributedDataParallel or module is None:
            return object.__new__(cls)
        device = next(module.parameters()).device
        shard_model(module, device, reshard_after_forward=reshard_after_forward, prefetch=prefetch)
        object.__setattr__(module, "module", module)  # not a registered submodule: state_dict unchanged
        object.__setattr__(module, "no_sync", _no_sync(module))
        return module  # not a DistributedDataParallel: its __init__ does not run

    DistributedDataParallel.__new__ = staticmethod(__new__)


def fsdp2_settings(model: Any, value: str) -> None:
    """Apply ``value`` (``"prefetch"`` or ``"keep-gathered"``) to an FSDP2-sharded ``model``."""
    blocks = units_of(model)
    if not blocks:
        raise ValueError("the model has no FSDP2 unit below its root (fully_shard per block first)")
    if value == "prefetch":
        for a, b in zip(blocks, blocks[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    elif value == "keep-gathered":
        model.set_reshard_after_forward(False)  # recurse: every unit keeps its parameters to backward
    else:
        raise ValueError(f"unknown FSDP2 setting {value!r}")
