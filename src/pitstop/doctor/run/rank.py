"""One rank of ``pitstop doctor --nproc-per-node N``: the child bootstrap under torchrun.

``torch.distributed.run`` starts ``python -c <boot> SPEC.json DIR`` once per rank (see
:func:`pitstop.doctor.run.torchrun.rank_command`) with its environment (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...). This module:

- writes ``DIR/rank<RANK>.pid`` (the rank is its own session leader, started so by torchrun:
  the parent kills its process group, DataLoader workers included, whatever happens);
- dies with the torchrun agent that started it;
- turns SIGTERM/SIGINT/SIGHUP into :class:`~pitstop.doctor.run.child.Interrupted` raised in the
  script, so the rank unwinds and writes what it measured (a partial report);
- runs the doctor's child (:func:`pitstop.doctor.run.child.run_in_process`) with the
  distributed recorder, writing ``DIR/rank<RANK>.json``;
- exits non-zero when the script failed, so that torchrun ends the other ranks (a rank
  waiting for a dead peer would otherwise wait until the timeout).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from pathlib import Path

__all__ = ["main", "result_path", "pid_path", "FAILED"]

#: statuses for which the rank exits non-zero
FAILED = ("error", "setup_error", "crashed")


def result_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"rank{rank}.json"


def pid_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"rank{rank}.pid"


def _interrupt(finishing: Path, signum: int, frame: object) -> None:
    from pitstop.doctor.run.child import Interrupted

    if finishing.exists():
        return  # the script is over and the report is being written: let it finish
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", signal.SIGTERM)):
        signal.signal(sig, signal.SIG_IGN)  # one interruption is enough: let the rank write its report
    raise Interrupted(signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -c <boot> SPEC.json DIR  (started by torch.distributed.run)", file=sys.stderr)
        return 2
    from pitstop.lifecycle import die_with_parent

    die_with_parent(os.getppid())
    rank = int(os.environ.get("RANK", "0"))
    directory = argv[1]
    from pitstop.doctor.run.runner import FINISHING_SUFFIX

    handler = functools.partial(_interrupt, Path(str(result_path(directory, rank)) + FINISHING_SUFFIX))
    pid_path(directory, rank).write_text(str(os.getpid()), encoding="utf-8")
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", signal.SIGTERM)):
        signal.signal(sig, handler)
    try:
        from pitstop.doctor.run.child import Interrupted, run_in_process
        from pitstop.doctor.run.spec import RunSpec
    except BaseException:  # interrupted while importing: nothing measured yet
        return 128 + signal.SIGTERM
    with open(argv[0], encoding="utf-8") as f:
        spec = RunSpec.from_dict(json.load(f))
    out = result_path(directory, rank)
    try:
        status = run_in_process(spec, str(out))
    except Interrupted as exc:  # before the script started (importing torch): nothing measured
        return 128 + exc.signum
    if status in FAILED:
        return 1
    try:
        code = json.loads(out.read_text(encoding="utf-8")).get("exit_code")
    except (OSError, ValueError):
        return 1
    return 1 if isinstance(code, int) and code != 0 else 0
