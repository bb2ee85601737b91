"""Sharded checkpoints of an FSDP2 run (``Recipe(strategy="fsdp2")``): ``torch.distributed.checkpoint``.

A checkpoint of step N is two parts:

- ``step-N.dcp/``: the model's and the optimizer's state as every rank holds it (its shards),
  written by all ranks at once with ``torch.distributed.checkpoint.save`` from
  ``get_state_dict(model, optimizer)`` (sharded ``DTensor`` values; no rank gathers the whole
  model). It is written into ``.step-N.dcp.pitstop-tmp/`` and renamed into place by rank 0
  once every rank finished (a barrier), then the directory is ``fsync``-ed: a run killed
  while writing leaves the temporary directory, never a half-written ``step-N.dcp``;
- ``step-N.pt``: the rest (step, position, every rank's RNG states, scheduler, recipe), written
  by rank 0 as every pitstop checkpoint, atomically, *after* the rename, with
  ``"sharded": "step-N.dcp"``: a ``.pt`` file that names a sharded part exists only once that
  part is complete.

Loading (:func:`load_sharded`) reads the directory into the state dicts of the sharded model and
optimizer with ``torch.distributed.checkpoint.load`` and ``set_state_dict``: the planner reads
each rank's slices from whatever shards were saved, so a checkpoint written by 2 ranks resumes
on 3 (or 1).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

from pitstop.engine.checkpoint import CheckpointError
from pitstop.engine.ckptdir import sharded_name

__all__ = ["TMP_SUFFIX", "save_sharded", "load_sharded"]

TMP_SUFFIX = ".pitstop-tmp"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, directory: Path, pt_name: str, *,
                 is_main: bool) -> str:
    """Write the sharded part of a checkpoint (a collective: every rank calls it). Returns the
    directory's name (relative to ``directory``)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    name = sharded_name(pt_name)
    final, tmp = directory / name, directory / ("." + name + TMP_SUFFIX)
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # a killed writer's leftover of the same step
    dist.barrier()
    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=str(tmp))
    dist.barrier()  # every rank's files are in tmp
    if is_main:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(directory)
    dist.barrier()  # the part is in place before any rank goes on (or reads it)
    return name


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Load the sharded part at ``path`` into the sharded ``model`` and ``optimizer`` (every rank
    calls it; the ranks may be more or fewer than wrote it)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    if not path.is_dir():
        raise CheckpointError(f"{path}: the sharded part of this checkpoint is missing (a checkpoint of "
                              "Recipe(strategy='fsdp2') is the .pt file and this directory)")
    msd, osd = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": msd, "optimizer": osd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
