"""Checkpoints that survive a crash and load without running code (PIT404, PIT903, PIT904).

- **Atomic** (:func:`pitstop.atomic.write_atomic`): the state is written to a temporary file
  created with ``mkstemp`` (``O_EXCL``: a planted file or link is never followed) in the same
  directory, flushed and ``fsync``-ed, renamed over the final name with ``os.replace`` (atomic
  within a filesystem), and the directory is ``fsync``-ed so the rename itself survives a power
  loss. A crash at any moment leaves the previous checkpoint intact and at most a stray
  ``.step-*.pt.pitstop-tmp.*`` file, which is never taken for a checkpoint and is deleted by
  the next write in that directory once its process is gone.
- **Per-run pruning**: ``keep`` deletes only older files of the same run, as recorded in the
  directory's manifest (:mod:`pitstop.engine.ckptdir`), never the file just written.
- **Damaged vs refused**: a file whose bytes are not what was written (truncated, torn, a zip
  member cut short or failing its CRC) raises :class:`CorruptCheckpointError`, and only such a
  file is skipped by :func:`load_latest` (with a warning naming it) in favour of the previous
  one. A complete file that still cannot be used (it would need the full unpickler, is not in
  torch's zip format, is not a pitstop checkpoint) raises :class:`CheckpointError` and stops
  the search: resuming silently from an older state, or from scratch, would hide it.
- **Safe load**: ``torch.load(..., map_location=..., weights_only=True)``. Everything the engine
  stores is of weights-only types: tensors, numbers, strings, lists, tuples, dicts (NumPy's RNG
  key array is stored as a tensor). A file that would need the full unpickler (and could run
  code from the file) is refused with :class:`CheckpointError`.
- **Cheap discovery**: :func:`latest_checkpoint` reads only each candidate's zip directory and
  member headers (a few bytes per tensor), enough to reject a truncated or torn file; the CRC
  pass over every byte and the unpickling happen in :func:`load_checkpoint`.
"""

from __future__ import annotations

import pickle
import random
import re
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pitstop.atomic import write_atomic
from pitstop.engine.ckptdir import Manifest, check_keep

__all__ = ["CheckpointError", "CorruptCheckpointError", "save_checkpoint", "load_checkpoint", "load_latest", "latest_checkpoint",
           "list_checkpoints", "checkpoint_path", "rng_state", "set_rng_state"]

_NAME = re.compile(r"^step-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, truncated, corrupt, or unsafe to unpickle."""


class CorruptCheckpointError(CheckpointError):
    """The file's bytes are not those that were written (truncated, torn, CRC mismatch): the
    one kind of unusable checkpoint that :func:`load_latest` skips for the previous one."""


def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step-{step:09d}.pt"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """``step-*.pt`` files in ``directory``, newest (highest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m[1]), p) for p in directory.iterdir() if (m := _NAME.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found, reverse=True)]


def save_checkpoint(state: dict[str, Any], path: str | Path, *, keep: int | None = None,
                    run: str | None = None) -> Path:
    """Write ``state`` to ``path`` atomically (temp file, fsync, rename, fsync dir).

    ``run``: the id of the run writing it (default ``state["run"]``), recorded in the
    directory's manifest when given or when ``keep`` is. ``keep`` (>= 1): afterwards delete
    that run's files beyond the ``keep`` most recently written; files of other runs, and files
    the manifest does not list, are never deleted. Returns the final path."""
    path = Path(path)
    check_keep(keep, "keep")
    if run is None and isinstance(state, dict) and isinstance(state.get("run"), str):
        run = state["run"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: torch.save(state, f))
    if keep is not None or run is not None:
        Manifest(path.parent).record(run or "default", path, keep)
    return path


_ZIP_MAGIC = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., file name length, extra field length


def _damage(path: Path) -> str | None:
    """Why ``path`` is visibly truncated or torn, or ``None`` when its zip structure is whole.

    Cheap: reads the end-of-archive directory and each member's 30-byte local header, and
    checks that every member lies inside the file before the directory. A torn write lacks the
    directory (torch writes it last); a file cut or spliced elsewhere moves the members off
    their recorded offsets. Bit rot inside a member's data is left to the CRC pass of
    :func:`load_checkpoint`. A non-empty file that is not a zip at all is not "damaged": it is
    refused by :func:`load_checkpoint`."""
    with open(path, "rb") as f:
        head = f.read(len(_ZIP_MAGIC))
        if not _ZIP_MAGIC.startswith(head):
            return None  # not a zip archive: not our torn write; load_checkpoint names what it is
        if len(head) < len(_ZIP_MAGIC):
            return f"{len(head)} bytes long"
        try:
            with zipfile.ZipFile(f) as zf:
                members, directory = zf.infolist(), zf.start_dir
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            return str(exc)
        for info in members:
            # zipfile shifts every recorded offset by how far the directory moved, so bytes cut
            # anywhere before it put the first member (written at offset 0) at a negative one
            if info.header_offset < 0:
                return f"{-info.header_offset} bytes missing before the zip directory"
            f.seek(info.header_offset)
            raw = f.read(_LOCAL_HEADER.size)
            if len(raw) < _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(raw)[0] != _ZIP_MAGIC:
                return f"member {info.filename!r} is not where the zip directory says"
            _, name_len, extra_len = _LOCAL_HEADER.unpack(raw)
            if f.read(name_len) != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
                return f"member {info.filename!r} is not where the zip directory says"
            if info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size > directory:
                return f"member {info.filename!r} runs past the end of the data"
    return None


def _refusal(exc: BaseException) -> str:
    """What torch's weights-only unpickler refused, without torch's advice to turn it off."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    return f"it needs {found[1]}, which is" if found else "it holds objects"


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True`` onto ``map_location``. Raises
    :class:`CorruptCheckpointError` naming the file when it is truncated, torn or fails a CRC
    check, and :class:`CheckpointError` when it is missing, holds pickled objects that would
    need the full unpickler, or is complete but not a pitstop checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        damage = _damage(path)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if damage is not None:
        raise CorruptCheckpointError(f"{path}: truncated or corrupt checkpoint ({damage})")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a checkpoint in torch's zip format (pitstop writes no other), so it is "
                              "not loaded")
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()  # reads every member and checks its CRC
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CorruptCheckpointError(f"{path}: truncated or corrupt checkpoint ({exc})") from None
    if bad is not None:
        raise CorruptCheckpointError(f"{path}: corrupt checkpoint (CRC mismatch in member {bad!r})")
    # From here the bytes are exactly those written: a failure is the file's content, not damage.
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused to load: {_refusal(exc)} outside torch's weights-only allow-list, and unpickling "
            "it could run code from the file. pitstop loads checkpoints with weights_only=True only (PIT903); "
            "the checkpoints fit writes need nothing more") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot be loaded ({str(exc).splitlines()[0]})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a pitstop checkpoint (holds a {type(state).__name__}, not a dict)")
    return state


def load_latest(directory: str | Path, map_location: Any = "cpu", *,
                candidates: list[Path] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint of ``directory`` that loads, or ``None`` if there is none.

    ``candidates``: the files to try, in that order (``fit`` passes the current run's files
    from the manifest); default: every ``step-*.pt`` file, highest step first.

    A newer file that is truncated or corrupt (:class:`CorruptCheckpointError`) is skipped with
    a ``UserWarning`` naming it. Any other :class:`CheckpointError` (a file refused by the
    weights-only loader, a file that is not a pitstop checkpoint) is raised: the search never
    falls back past it, so a resume never silently starts from an older state or from scratch."""
    candidates = list_checkpoints(directory) if candidates is None else list(candidates)
    for i, path in enumerate(candidates):
        try:
            return path, load_checkpoint(path, map_location)
        except CorruptCheckpointError as exc:
            warnings.warn(f"skipping unusable checkpoint: {exc}; trying the previous one", UserWarning, stacklevel=2)
        except CheckpointError as exc:
            older = candidates[i + 1] if i + 1 < len(candidates) else None
            hint = (f"remove or move it to resume from the previous file, {older.name}" if older is not None
                    else "it is the only candidate; remove or move it to start from scratch")
            raise CheckpointError(f"{exc}. Not falling back past it: {hint}") from None
    return None


def latest_checkpoint(directory: str | Path) -> Path | None:
    """Path of the newest checkpoint in ``directory`` that is not truncated or torn.

    Cheap: reads each candidate's zip directory and member headers, never the tensor data (a
    newer damaged file is skipped with a ``UserWarning`` naming it). It is the file
    :func:`load_latest` starts from; :func:`load_checkpoint` still checks every byte's CRC
    and refuses a file that would need the full unpickler."""
    for path in list_checkpoints(directory):
        damage = _damage(path)
        if damage is None:
            return path
        warnings.warn(f"skipping unusable checkpoint: {path}: truncated or corrupt checkpoint ({damage}); trying "
                      "the previous one", UserWarning, stacklevel=2)
    return None


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
