"""Checkpoints that survive a crash and load without running code (PIT404, PIT903, PIT904).

- **Atomic**: the state is written to a temporary file in the same directory, flushed and
  ``fsync``-ed, renamed over the final name with ``os.replace`` (atomic within a filesystem),
  and the directory is ``fsync``-ed so the rename itself survives a power loss. A crash at any
  moment leaves the previous checkpoint intact and at most a stray ``.*.tmp-*`` file, which is
  never taken for a checkpoint.
- **Latest good**: :func:`load_latest` tries ``step-*.pt`` files newest first and skips, with a
  warning naming the file, any that is truncated, corrupt (zip CRC check) or refused.
- **Safe load**: ``torch.load(..., map_location=..., weights_only=True)``. Everything the engine
  stores is of weights-only types: tensors, numbers, strings, lists, tuples, dicts (NumPy's RNG
  key array is stored as a tensor). A file that would need the full unpickler (and could run
  code from the file) is refused with :class:`CheckpointError`.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "load_latest", "latest_checkpoint",
           "list_checkpoints", "checkpoint_path", "rng_state", "set_rng_state"]

_NAME = re.compile(r"^step-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, truncated, corrupt, or unsafe to unpickle."""


def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step-{step:09d}.pt"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """``step-*.pt`` files in ``directory``, newest (highest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m[1]), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found, reverse=True)]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(state: dict[str, Any], path: str | Path, *, keep: int | None = None) -> Path:
    """Write ``state`` to ``path`` atomically (temp file, fsync, rename, fsync dir).

    ``keep``: afterwards delete all but the ``keep`` newest ``step-*.pt`` files of the
    directory. Returns the final path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # and the rename itself is durable
    if keep is not None:
        for old in list_checkpoints(path.parent)[keep:]:
            old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True`` onto ``map_location``. Raises :class:`CheckpointError`
    naming the file when it is missing, truncated or corrupt, or holds pickled objects that
    would need the full unpickler."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()  # reads every member and checks its CRC
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({exc})") from None
    if bad is not None:
        raise CheckpointError(f"{path}: corrupt checkpoint (CRC mismatch in member {bad!r})")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: refused to load: the file holds pickled objects outside torch's weights-only "
            f"allow-list, and unpickling them could run code from the file ({first}). pitstop loads "
            "with weights_only=True only (PIT903)") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({str(exc).splitlines()[0]})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a pitstop checkpoint (holds a {type(state).__name__}, not a dict)")
    return state


def load_latest(directory: str | Path, map_location: Any = "cpu") -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of ``directory`` that loads, or ``None`` if there is none.
    Each newer file that fails to load is skipped with a ``UserWarning`` naming it."""
    for path in list_checkpoints(directory):
        try:
            return path, load_checkpoint(path, map_location)
        except CheckpointError as exc:
            warnings.warn(f"skipping unusable checkpoint: {exc}; trying the previous one", UserWarning, stacklevel=2)
    return None


def latest_checkpoint(directory: str | Path) -> Path | None:
    """Path of the newest checkpoint in ``directory`` that loads (never a truncated one)."""
    found = load_latest(directory)
    return found[0] if found else None


# -- RNG states, in weights-only types -------------------------------------------------
def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch CPU and (initialized) CUDA generator states."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),  # (version, tuple of 625 ints, gauss_next)
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())  # generator states are CPU byte tensors
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
