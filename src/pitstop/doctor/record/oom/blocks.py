"""The model's repeated blocks: what activation checkpointing (PIT401) would recompute.

Shared by the doctor (``doctor/record/oom/watch.py`` measures each block's saved activations)
and ``pitstop tune`` (the checkpoint knob's value): the items of the outermost
``ModuleList`` / ``Sequential`` that holds at least two *blocks* (items with two or more
parametrized layers). A sequence of single layers is no candidate: checkpointing one conv
saves its input anyway, so it saves nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["find_blocks", "block_items"]


def _param_layers(module: Any) -> int:
    return sum(1 for m in module.modules() if any(True for _ in m.parameters(recurse=False)))


def block_items(model: Any) -> tuple[str, list[tuple[str, Any]]]:
    """``(pattern, [(qualified name, block module), ...])`` of the outermost sequence of
    blocks, or ``("", [])`` when the model has none."""
    from torch import nn

    for name, module in model.named_modules():
        if name and isinstance(module, (nn.ModuleList, nn.Sequential)):
            if sum(1 for m in module if _param_layers(m) >= 2) >= 2:
                return f"{name}.*", [(f"{name}.{k}", m) for k, m in module.named_children() if _param_layers(m) >= 2]
    return "", []


def find_blocks(model: Any) -> tuple[str, ...]:
    """The checkpointing candidates as ``fnmatch`` patterns (``("blocks.*",)``), or ``()``."""
    pattern, _ = block_items(model)
    return (pattern,) if pattern else ()
