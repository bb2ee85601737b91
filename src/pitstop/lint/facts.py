"""What a file says about itself beyond one node (mixed into :class:`pitstop.lint.context.FileContext`):
its line scan (:class:`pitstop.lint.index.project.ModuleInfo`), whether it may run on an accelerator, the
functions decorated no_grad here or in the project, and the kind of a Dataset class it uses.
Needs ``source``/``module``/``path``/``project``/``cuda_implied`` and the caches ``_info``,
``_device``, ``_no_grad`` from the class it is mixed into."""

from __future__ import annotations

import re
from typing import Any

from pitstop.lint.index.project import dataset_kind, scan_source

__all__ = ["FileFacts"]

#: code that may run on an accelerator names one of these (comments stripped first)
_DEVICE_HINT = re.compile(r"device|local_rank|\bgpu|accelerat|fabric|lightning|transformers|deepspeed|detectron2|"
                          r"FullyShardedDataParallel|fully_shard|FSDP|DistributedDataParallel|nccl", re.I)


class FileFacts:
    """File-wide facts, computed on first use and cached on the instance."""

    @property
    def info(self) -> Any:
        """This file's :class:`pitstop.lint.index.project.ModuleInfo` (the project index's line scan)."""
        if self._info is None:
            text = self.source if self.source is not None else self.module.code
            known = self.project.scan_of(self.path, text) if self.project is not None else None
            self._info = known if known is not None else scan_source(text, self.path)
        return self._info

    @property
    def device_implied(self) -> bool:
        """The file may run on an accelerator: CUDA implied, or its code names a device, a local
        rank, a GPU, a framework that picks the accelerator itself (accelerate, Lightning/Fabric,
        transformers, DeepSpeed, detectron2), FSDP, DDP or NCCL.
        False means a CPU-only script (``pytorch/examples/regression``)."""
        if self.cuda_implied:
            return True
        if self._device is None:
            text = self.source if self.source is not None else self.module.code
            self._device = _DEVICE_HINT.search(re.sub(r"#[^\n]*", "", text)) is not None  # code, not comments
        return self._device

    @property
    def shards_model(self) -> bool:
        """This file's project (or the file, linted alone) shards a model with FSDP or DeepSpeed, in its code."""
        return self.project.shards(self.path) if self.project is not None else self.info.shards

    def wraps_ddp(self, name: str) -> bool:
        """``name`` is a function, here or imported from a linted file, that wraps a model in DistributedDataParallel
        (yolov5's ``smart_DDP``)."""
        return self._defined_with(name, "ddp_helpers")

    def _defined_with(self, name: str, field: str) -> bool:
        if name in getattr(self.info, field):
            return True
        imported = self.info.imports.get(name)
        target = self.project.module_of(self.path, imported[0]) if imported and self.project is not None else None
        return target is not None and imported[1] in getattr(target, field)

    def returns_batch_sum(self, name: str) -> bool:
        """``name`` is a loss function or class, here or imported from a linted file, whose value is the batch's
        sum: its return multiplies by the batch size (``return (lbox + lobj + lcls) * bs``)."""
        return self._defined_with(name, "batch_sum")

    def no_grad_functions(self) -> frozenset:
        """Names of functions/methods decorated no_grad/inference_mode, here or in the project."""
        if self._no_grad is None:
            own = self.info.no_grad_functions
            self._no_grad = own | (self.project.no_grad_functions(self.path) if self.project is not None else frozenset())
        return self._no_grad

    def dataset_kind(self, name: str) -> str | None:
        """``"in_memory"`` / ``"unsharded_iterable"`` / ``"other"`` for a Dataset class defined here
        or imported from a linted file (see :meth:`pitstop.lint.index.project.ProjectIndex.dataset_kind`)."""
        kind = dataset_kind(self.info, name)
        if kind is None and self.project is not None:
            kind = self.project.dataset_kind(self.path, name)
        return kind
