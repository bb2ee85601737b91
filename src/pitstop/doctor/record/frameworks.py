"""Which training framework drives the script, seen from inside it (doctor, in the child).

Frameworks (Lightning ``Trainer``, Lightning Fabric, the Hugging Face ``Trainer``,
Accelerate) all end in a plain ``torch.optim.Optimizer.step()``, so the doctor measures them
like any loop. What changes is what the user can act on: their levers are the framework's
options, and their code is the part of the stack *outside* the framework's packages. This
module answers, from the call stack and objects of the running script (never from names in
the user's code):

- :func:`detect`: at the first optimizer step, which framework's frames are on the stack and
  which class drove the step, and what it was configured with (its precision setting, ...):
  a :class:`FrameworkInfo`;
- :func:`unwrap`: the user's module inside framework and torch wrappers (Fabric's
  ``_FabricModule``, DDP/DataParallel, ``torch.compile``'s ``OptimizedModule``), by following
  their documented attributes, never by recursion through ``__getattr__``;
- :func:`framework_file` / :func:`resolve_site`: whether a source file belongs to a framework
  package (so call sites skip it), and the user's line behind a sync a framework made on its
  behalf (Lightning's progress-bar metrics, from ``self.log(..., prog_bar=True)``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

__all__ = ["FrameworkInfo", "FRAMEWORKS", "detect", "unwrap", "wrapper_chain", "framework_file", "resolve_site",
           "track_lightning_logs", "LABELS", "detect_imports"]

#: Framework names, most specific first: a Lightning Trainer runs on Fabric's utilities and
#: the HF Trainer on Accelerate, so the first whose frames are on the stack wins.
FRAMEWORKS = ("lightning", "transformers", "fabric", "accelerate")
#: How people call them.
LABELS = {"lightning": "Lightning Trainer", "transformers": "HF Trainer", "fabric": "Lightning Fabric",
          "accelerate": "Accelerate", None: "PyTorch"}
#: module-name prefixes of each framework's *driving* code (what calls optimizer.step()).
_DRIVERS = {"lightning": ("lightning.pytorch", "pytorch_lightning"),
            "transformers": ("transformers.trainer",),
            "fabric": ("lightning.fabric", "lightning_fabric"),
            "accelerate": ("accelerate",)}
#: top-level packages whose frames are framework code (skipped when looking for the user's line).
_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torchmetrics",
             "transformers", "accelerate")
_DIRS: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FrameworkInfo:
    """``name``: one of :data:`FRAMEWORKS` or None (a plain PyTorch loop); ``driver``: the
    class whose method stepped the optimizer (``lightning.pytorch.trainer.trainer.Trainer``);
    ``imported``: framework packages the script imported; ``versions``: their versions;
    ``configured``: what the framework was told (``precision``, ``num_workers``, ``optim``,
    ``torch_compile``, as the framework spells them)."""

    name: str | None = None
    driver: str | None = None
    imported: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    configured: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name or "PyTorch")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "driver": self.driver, "imported": list(self.imported),
                "versions": dict(self.versions), "configured": dict(self.configured)}


def _imported() -> tuple[tuple[str, ...], dict[str, str]]:
    names, versions = [], {}
    for pkg in ("lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate"):
        mod = sys.modules.get(pkg)
        if mod is not None:
            names.append(pkg)
            v = getattr(mod, "__version__", None)
            if isinstance(v, str):
                versions[pkg] = v
    return tuple(names), versions


def detect_imports() -> FrameworkInfo:
    """No framework drove a step (or none was seen): only what the script imported."""
    imported, versions = _imported()
    return FrameworkInfo(imported=imported, versions=versions)


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def detect(frame: FrameType | None = None, optimizer: Any = None) -> FrameworkInfo:
    """The framework driving the current optimizer step, from the call stack (outermost
    framework frame with a ``self`` names the driver)."""
    f = frame if frame is not None else sys._getframe(1)
    seen: dict[str, Any] = {}
    while f is not None:
        mod = f.f_globals.get("__name__", "") or ""
        for name, prefixes in _DRIVERS.items():
            if any(mod == p or mod.startswith(p + ".") for p in prefixes):
                this = f.f_locals.get("self")
                if this is not None:
                    seen[name] = this  # keeps the outermost one
                else:
                    seen.setdefault(name, None)
        f = f.f_back
    imported, versions = _imported()
    name = next((n for n in FRAMEWORKS if n in seen), None)
    if name is None:
        return FrameworkInfo(imported=imported, versions=versions)
    driver = seen[name]
    return FrameworkInfo(name=name, driver=_qualname(driver) if driver is not None else None, imported=imported,
                         versions=versions, configured=_configured(name, driver, optimizer))


def _configured(name: str, driver: Any, optimizer: Any) -> dict[str, Any]:
    """What the framework object says it was set to (best effort: attributes may move)."""
    out: dict[str, Any] = {}
    try:
        if name == "lightning" and driver is not None:
            trainer = driver if hasattr(driver, "precision") else getattr(driver, "trainer", None)
            if trainer is not None:
                out["precision"] = str(getattr(trainer, "precision", ""))
        elif name == "transformers" and driver is not None:
            args = getattr(driver, "args", None)
            if args is not None:
                out.update({k: _plain(getattr(args, k, None)) for k in
                            ("bf16", "fp16", "dataloader_num_workers", "torch_compile", "optim")})
        elif name == "fabric" and driver is not None:
            plugin = getattr(getattr(driver, "_strategy", None), "precision", None)
            if plugin is not None:
                out["precision"] = str(getattr(plugin, "precision", type(plugin).__name__))
        elif name == "accelerate":
            state = getattr(driver, "accelerator_state", None)
            if state is not None:
                out["mixed_precision"] = str(getattr(state, "mixed_precision", ""))
    except Exception:  # a framework's internals changed: detection still stands
        pass
    return {k: v for k, v in out.items() if v not in (None, "")}


def _plain(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) or v is None else str(v)


#: wrappers looked through (by class name: a user's module with a child called ``module`` is
#: not a wrapper), and the attributes they keep the wrapped module under: Fabric's
#: ``_FabricModule`` (``_forward_module``, maybe DDP or compiled; ``_original_module``),
#: DDP/DataParallel/FSDP/DeepSpeed (``module``) and ``torch.compile``'s ``OptimizedModule``
#: (``_orig_mod``).
_WRAPPED = ("_forward_module", "_orig_mod", "module", "_original_module")
_WRAPPER_CLASSES = frozenset({"_FabricModule", "DistributedDataParallel", "DataParallel", "OptimizedModule",
                              "FullyShardedDataParallel", "DeepSpeedEngine"})


def _inner(module: Any) -> Any:
    """The module a known wrapper holds, or None (reads the instance ``__dict__`` /
    ``_modules`` only, so a wrapper's ``__getattr__`` never runs)."""
    if type(module).__name__ not in _WRAPPER_CLASSES:
        return None
    own = getattr(module, "__dict__", {})
    subs = own.get("_modules") or {}
    for attr in _WRAPPED:
        inner = subs.get(attr) or own.get(attr)
        if inner is not None and inner is not module:
            return inner
    return None


def wrapper_chain(module: Any, limit: int = 8) -> list[str]:
    """Class names from the outermost wrapper to the user's module (one name: no wrapper)."""
    names = [type(module).__name__]
    for _ in range(limit):
        module = _inner(module)
        if module is None:
            break
        names.append(type(module).__name__)
    return names


def unwrap(module: Any, limit: int = 8) -> Any:
    """The innermost user module inside known wrappers (Fabric, DDP, DataParallel, FSDP,
    DeepSpeed, torch.compile; at most ``limit`` levels)."""
    for _ in range(limit):
        inner = _inner(module)
        if inner is None:
            return module
        module = inner
    return module


def _dirs() -> tuple[str, ...]:
    global _DIRS
    if _DIRS is None:
        dirs = []
        for pkg in _PACKAGES:
            try:
                spec = importlib.util.find_spec(pkg)
            except (ImportError, ValueError):
                spec = None
            for loc in (spec.submodule_search_locations or []) if spec else []:
                dirs.append(os.path.abspath(loc) + os.sep)
        _DIRS = tuple(dirs)
    return _DIRS


def framework_file(filename: str) -> bool:
    """True for a source file inside one of the framework packages."""
    dirs = _dirs()
    return bool(dirs) and filename.startswith(dirs)


def _lightning_module_class() -> Any:
    mod = sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")
    return getattr(mod, "LightningModule", None)


def track_lightning_logs(patches: Any, site: Any) -> None:
    """Record where the user's ``LightningModule.log(..., prog_bar=True)`` calls are (so a
    sync made later by Lightning's progress-bar metrics points at them). ``site(depth)``
    gives the caller's ``file:line``. The record lives on the patched method, so it goes
    when ``patches`` are restored."""
    cls = _lightning_module_class()
    if cls is None or "log" not in vars(cls):
        return
    original = vars(cls)["log"]
    sites: dict[str, str] = {}  # metric name -> "file:line" of its last prog_bar log call

    def log(self, name, value, *args, **kwargs):
        if kwargs.get("prog_bar"):
            where = site(2)
            if where:
                sites[str(name)] = where
        return original(self, name, value, *args, **kwargs)

    log.__wrapped__ = original  # type: ignore[attr-defined]
    log.pitstop_sites = sites  # type: ignore[attr-defined]
    patches.set(cls, "log", log)


def resolve_site(frame: FrameType | None) -> str | None:
    """For a call that a framework made on the user's behalf: the user's line that caused
    it, when the framework's frames say so (Lightning converting progress-bar metrics ->
    the ``self.log(..., prog_bar=True)`` of that metric); None to keep walking outwards."""
    f = frame
    while f is not None and framework_file(f.f_code.co_filename):
        if f.f_code.co_name == "metrics" and "forked_name" in f.f_locals:
            sites = getattr(getattr(_lightning_module_class(), "log", None), "pitstop_sites", None) or {}
            name = str(f.f_locals.get("forked_name"))
            hit = sites.get(name) or sites.get(name.split("_step")[0])
            if hit:
                return hit
        f = f.f_back
    return None
