"""Head surgery: find, replace or drop a model's final classifier layer."""

from __future__ import annotations

from torch import nn

__all__ = ["find_head", "replace_head", "drop_head"]


def find_head(model: nn.Module, name: str | None = None) -> tuple[str, nn.Linear]:
    """Return ``(dotted_name, module)`` of the head: ``name`` if given, else the last Linear."""
    modules = dict(model.named_modules())
    if name is not None:
        if name not in modules:
            raise KeyError(f"no submodule named {name!r}; have {', '.join(n for n in modules if n)[:200]}")
        return name, modules[name]
    linears = [(n, m) for n, m in modules.items() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"{type(model).__name__} has no nn.Linear layer to treat as its head; pass name=")
    return linears[-1]


def _set(model: nn.Module, dotted: str, new: nn.Module) -> None:
    parent_name, _, attr = dotted.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, new)


def replace_head(model: nn.Module, num_classes: int, name: str | None = None) -> nn.Linear:
    """Replace the head with a fresh ``nn.Linear(in_features, num_classes)`` (in place).

    The new layer is created on the old one's device and dtype; it is returned.
    """
    dotted, old = find_head(model, name)
    if not isinstance(old, nn.Linear):
        raise TypeError(f"head {dotted!r} is a {type(old).__name__}, not nn.Linear")
    new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None,
                    device=old.weight.device, dtype=old.weight.dtype)
    _set(model, dotted, new)
    return new


def drop_head(model: nn.Module, name: str | None = None) -> nn.Module:
    """Replace the head by ``nn.Identity()`` (in place) so the model returns features.

    Unlike seed 002's ``nn.Sequential(*list(model.children())[:-1])``, this keeps the
    model's own ``forward`` (flattening, skip connections), so it works beyond plain stacks.
    """
    dotted, _ = find_head(model, name)
    _set(model, dotted, nn.Identity())
    return model
