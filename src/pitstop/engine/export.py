"""A :class:`Recipe` in a training framework's own terms (torch-free, no framework imported).

Framework users do not call :func:`pitstop.fit`; their levers are the framework's options.
:func:`export` turns the fields a recipe *changes* (``Recipe.changed()``: the defaults leave
the user's setup alone) into:

- ``kwargs`` for the framework's config object: Lightning ``Trainer``, Lightning ``Fabric``,
  ``transformers.TrainingArguments`` or ``accelerate.Accelerator``;
- ``code``: the lines that have no constructor option there (``torch.compile(model)``
  before ``trainer.fit``, the ``DataLoader`` the user builds, a seed call);
- ``unsupported``: recipe fields the framework cannot express, with the reason (nothing
  is dropped silently).

:func:`read_back` reads the recipe fields back from a real framework object built from
``kwargs`` (the round-trip the tests run on real installs). Option names verified against
lightning 2.6, transformers 5.23 and accelerate 1.15.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pitstop.engine.recipe import Recipe

__all__ = ["FrameworkConfig", "export", "read_back", "TARGETS"]

#: framework name -> the object its kwargs are for
TARGETS = {"lightning": "lightning.Trainer", "fabric": "lightning.Fabric",
           "transformers": "transformers.TrainingArguments", "accelerate": "accelerate.Accelerator"}
_LIGHTNING_PRECISION = {"fp32": "32-true", "tf32": "32-true", "bf16-mixed": "bf16-mixed", "fp16-mixed": "16-mixed"}
_ACCELERATE_PRECISION = {"fp32": "no", "tf32": "no", "bf16-mixed": "bf16", "fp16-mixed": "fp16"}
_LOADER_FIELDS = {"num_workers": "num_workers", "pin_memory": "pin_memory",
                  "persistent_workers": "persistent_workers", "prefetch": "prefetch_factor"}


@dataclass(frozen=True)
class FrameworkConfig:
    """One framework's form of a recipe (see the module docs)."""

    framework: str
    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    code: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()

    def snippet(self, name: str | None = None) -> str:
        """Paste-ready lines: the constructor call with ``kwargs``, then ``code``."""
        cls = self.target.rsplit(".", 1)[1]
        var = name or {"lightning": "trainer", "fabric": "fabric", "transformers": "args",
                       "accelerate": "accelerator"}[self.framework]
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        if self.framework == "transformers":
            args = "output_dir=..., " + args if args else "output_dir=..."
        lines = [f"{var} = {cls}({args}{', ...' if self.kwargs else '...'})"]
        lines += list(self.code)
        lines += [f"# not expressible here: {u}" for u in self.unsupported]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "target": self.target, "kwargs": dict(self.kwargs),
                "code": list(self.code), "unsupported": list(self.unsupported)}


def _loader_line(changed: dict[str, Any]) -> list[str]:
    opts = {_LOADER_FIELDS[k]: v for k, v in changed.items() if k in _LOADER_FIELDS}
    if not opts:
        return []
    return ["train_loader = DataLoader(dataset, batch_size=..., " + ", ".join(f"{k}={v!r}" for k, v in opts.items()) + ")"]


def _common_code(changed: dict[str, Any], unsupported: list[str], *, compile_line: bool, seed_call: str | None) -> list[str]:
    code: list[str] = []
    if changed.get("precision") == "tf32":
        code.append('torch.set_float32_matmul_precision("high")  # TF32 matmuls (CUDA)')
    if compile_line and changed.get("compile"):
        mode = changed["compile"]
        code.append("model = torch.compile(model" + (f", mode={mode!r}" if mode != "default" else "") + ")")
    if changed.get("channels_last"):
        code.append("model = model.to(memory_format=torch.channels_last)  # and 4-D inputs in the step")
    if changed.get("optimizer_impl") in ("fused", "foreach"):
        code.append(f"optimizer = torch.optim.AdamW(model.parameters(), ..., {changed['optimizer_impl']}=True)")
    elif changed.get("optimizer_impl") == "for-loop":
        code.append("optimizer = torch.optim.AdamW(model.parameters(), ..., foreach=False)")
    if changed.get("cudnn_benchmark"):
        code.append("torch.backends.cudnn.benchmark = True")
    if seed_call and changed.get("seed") is not None:
        code.append(seed_call.format(seed=changed["seed"]))
    if changed.get("checkpoint_activations"):
        unsupported.append(f"checkpoint_activations={list(changed['checkpoint_activations'])}: wrap those "
                           "submodules' forward in torch.utils.checkpoint.checkpoint(..., use_reentrant=False)")
    if changed.get("skip_nonfinite"):
        unsupported.append("skip_nonfinite=True: no option; check torch.isfinite(loss) before stepping")
    if changed.get("non_blocking") is False:
        unsupported.append("non_blocking=False: the framework moves batches itself")
    return code


def _loop_code(c: dict[str, Any], *, accumulate: str, clip_norm: str, clip_value: str) -> list[str]:
    """Lines for a loop the user writes (Fabric, Accelerate): accumulation, clipping, determinism."""
    code = []
    if c.get("accumulate", 1) > 1:
        code.append(accumulate.format(n=c["accumulate"]))
    if c.get("clip_norm") is not None:
        code.append(clip_norm.format(v=c["clip_norm"]))
    if c.get("clip_value") is not None:
        code.append(clip_value.format(v=c["clip_value"]))
    if c.get("deterministic"):
        code.append("torch.use_deterministic_algorithms(True)")
    return code


def export(recipe: Recipe, framework: str) -> FrameworkConfig:
    """``recipe``'s changed fields as ``framework``'s kwargs, extra code and leftovers."""
    if framework not in TARGETS:
        raise ValueError(f"unknown framework {framework!r}; one of {', '.join(TARGETS)}")
    changed = recipe.changed()
    return {"lightning": _lightning, "fabric": _fabric, "transformers": _transformers,
            "accelerate": _accelerate}[framework](changed)


def _device(changed: dict[str, Any], kw: dict[str, Any]) -> None:
    dev = changed.get("device")
    if dev:
        kw["accelerator"] = "gpu" if dev.startswith("cuda") else dev


def _lightning(c: dict[str, Any]) -> FrameworkConfig:
    kw: dict[str, Any] = {}
    un: list[str] = []
    if "precision" in c:
        kw["precision"] = _LIGHTNING_PRECISION[c["precision"]]
    if "accumulate" in c:
        kw["accumulate_grad_batches"] = c["accumulate"]
    if c.get("clip_norm") is not None:
        kw.update(gradient_clip_val=c["clip_norm"], gradient_clip_algorithm="norm")
    if c.get("clip_value") is not None:
        kw.update(gradient_clip_val=c["clip_value"], gradient_clip_algorithm="value")
    if c.get("deterministic"):
        kw["deterministic"] = True
    if c.get("cudnn_benchmark"):
        kw["benchmark"] = True
        c = {k: v for k, v in c.items() if k != "cudnn_benchmark"}
    _device(c, kw)
    code = _common_code(c, un, compile_line=True, seed_call="lightning.seed_everything({seed})")
    code += _loader_line(c)
    if c.get("compile"):
        code.append("trainer.fit(model, train_loader)  # the compiled LightningModule")
    return FrameworkConfig("lightning", TARGETS["lightning"], kw, tuple(code), tuple(un))


def _fabric(c: dict[str, Any]) -> FrameworkConfig:
    kw: dict[str, Any] = {}
    un: list[str] = []
    if "precision" in c:
        kw["precision"] = _LIGHTNING_PRECISION[c["precision"]]
    _device(c, kw)
    code = _common_code(c, un, compile_line=True, seed_call="fabric.seed_everything({seed})")
    if c.get("compile"):
        code.append("model, optimizer = fabric.setup(model, optimizer)  # after torch.compile")
    code += _loader_line(c) + _loop_code(
        c, accumulate="# accumulate {n} micro-batches: with fabric.no_backward_sync(model, enabled=not last): "
                      "fabric.backward(loss); step every {n}",
        clip_norm="fabric.clip_gradients(model, optimizer, max_norm={v!r})  # before optimizer.step()",
        clip_value="fabric.clip_gradients(model, optimizer, clip_val={v!r})  # before optimizer.step()")
    return FrameworkConfig("fabric", TARGETS["fabric"], kw, tuple(code), tuple(un))


def _transformers(c: dict[str, Any]) -> FrameworkConfig:
    kw: dict[str, Any] = {}
    un: list[str] = []
    prec = c.get("precision")
    if prec == "bf16-mixed":
        kw["bf16"] = True
    elif prec == "fp16-mixed":
        kw["fp16"] = True
    elif prec == "tf32":
        kw["tf32"] = True
    if "accumulate" in c:
        kw["gradient_accumulation_steps"] = c["accumulate"]
    if c.get("clip_norm") is not None:
        kw["max_grad_norm"] = c["clip_norm"]
    if c.get("clip_value") is not None:
        un.append(f"clip_value={c['clip_value']!r}: TrainingArguments clips by norm only (max_grad_norm)")
    if c.get("compile"):
        kw["torch_compile"] = True
        if c["compile"] != "default":
            kw["torch_compile_mode"] = c["compile"]
    impl = c.get("optimizer_impl")
    if impl == "fused":
        kw["optim"] = "adamw_torch_fused"
    elif impl:
        un.append(f"optimizer_impl={impl!r}: TrainingArguments.optim names fused AdamW only (adamw_torch_fused)")
    for field_, opt in (("num_workers", "dataloader_num_workers"), ("pin_memory", "dataloader_pin_memory"),
                        ("persistent_workers", "dataloader_persistent_workers"),
                        ("prefetch", "dataloader_prefetch_factor")):
        if c.get(field_) is not None:
            kw[opt] = c[field_]
    if "seed" in c:
        kw["seed"] = c["seed"]
    if c.get("deterministic"):
        kw["full_determinism"] = True
    if c.get("device") == "cpu":
        kw["use_cpu"] = True
    rest = {k: v for k, v in c.items() if k in ("channels_last", "cudnn_benchmark", "checkpoint_activations",
                                                   "skip_nonfinite", "non_blocking")}
    code = _common_code(rest, un, compile_line=False, seed_call=None)
    return FrameworkConfig("transformers", TARGETS["transformers"], kw, tuple(code), tuple(un))


def _accelerate(c: dict[str, Any]) -> FrameworkConfig:
    kw: dict[str, Any] = {}
    un: list[str] = []
    if "precision" in c:
        kw["mixed_precision"] = _ACCELERATE_PRECISION[c["precision"]]
    if "accumulate" in c:
        kw["gradient_accumulation_steps"] = c["accumulate"]
    if c.get("compile"):
        kw["dynamo_backend"] = "inductor"
        if c["compile"] != "default":
            un.append(f"compile={c['compile']!r}: pass TorchDynamoPlugin(backend='inductor', mode={c['compile']!r}) "
                      "as dynamo_plugin instead of dynamo_backend")
    if c.get("device") == "cpu":
        kw["cpu"] = True
    rest = {k: v for k, v in c.items() if k != "compile"}
    code = _common_code(rest, un, compile_line=False, seed_call="accelerate.utils.set_seed({seed})")
    code += _loader_line(c) + _loop_code(
        c, accumulate="with accelerator.accumulate(model): ...  # around each micro-batch's forward/backward/step",
        clip_norm="accelerator.clip_grad_norm_(model.parameters(), {v!r})  # after accelerator.backward",
        clip_value="accelerator.clip_grad_value_(model.parameters(), {v!r})  # after accelerator.backward")
    return FrameworkConfig("accelerate", TARGETS["accelerate"], kw, tuple(code), tuple(un))


def read_back(obj: Any) -> dict[str, Any]:
    """The recipe fields a real framework object (built from :func:`export`'s kwargs) holds:
    a ``lightning.Trainer``, ``lightning.Fabric``, ``TrainingArguments`` or ``Accelerator``."""
    name = type(obj).__name__
    inv_l = {"bf16-mixed": "bf16-mixed", "16-mixed": "fp16-mixed", "32-true": "fp32"}
    out: dict[str, Any] = {}
    if name == "Trainer" and hasattr(obj, "accumulate_grad_batches"):
        out["precision"] = inv_l.get(str(obj.precision), str(obj.precision))
        out["accumulate"] = obj.accumulate_grad_batches
        if obj.gradient_clip_val:
            algo = str(getattr(obj.gradient_clip_algorithm, "value", obj.gradient_clip_algorithm))
            out["clip_norm" if algo == "norm" else "clip_value"] = float(obj.gradient_clip_val)
    elif name == "Fabric":
        plugin = obj.strategy.precision
        out["precision"] = inv_l.get(str(getattr(plugin, "precision", "")), "fp32")
    elif name == "TrainingArguments":
        out["precision"] = "bf16-mixed" if obj.bf16 else "fp16-mixed" if obj.fp16 else "tf32" if obj.tf32 else "fp32"
        out["accumulate"] = obj.gradient_accumulation_steps
        out["clip_norm"] = obj.max_grad_norm or None
        out["compile"] = (obj.torch_compile_mode or "default") if obj.torch_compile else None
        out["optimizer_impl"] = "fused" if str(getattr(obj.optim, "value", obj.optim)) == "adamw_torch_fused" else None
        out.update(num_workers=obj.dataloader_num_workers, pin_memory=obj.dataloader_pin_memory,
                   persistent_workers=obj.dataloader_persistent_workers, prefetch=obj.dataloader_prefetch_factor,
                   seed=obj.seed)
    elif name == "Accelerator":
        inv_a = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "no": "fp32"}
        out["precision"] = inv_a.get(str(obj.mixed_precision), str(obj.mixed_precision))
        out["accumulate"] = obj.gradient_accumulation_steps
        backend = str(getattr(getattr(obj.state, "dynamo_plugin", None), "backend", "NO"))
        out["compile"] = "default" if "INDUCTOR" in backend.upper() else None
    else:
        raise TypeError(f"read_back: not a framework config object: {type(obj).__module__}.{name}")
    return out
