"""The typed timeline of one trace file (torch-free): what :mod:`pitstop.trace.load` builds
and every analyzer reads.

Events are kept in columns (numpy arrays, read-only) rather than one object per event: a
rank's trace holds millions of events, and the analyzers work on whole columns (interval
unions, sorted searches). Times are microseconds on the trace's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GPU_KERNEL", "GPU_MEMCPY", "GPU_MEMSET", "COPY_UNKNOWN", "COPY_PAGEABLE", "COPY_PINNED",
           "OP_OPERATOR", "OP_ANNOTATION", "Table", "Device", "Step", "Timeline"]

#: ``Table.kind`` values of the GPU table.
GPU_KERNEL, GPU_MEMCPY, GPU_MEMSET = 0, 1, 2
#: ``Table.flag`` values of memcpy rows: the host side of a copy.
COPY_UNKNOWN, COPY_PAGEABLE, COPY_PINNED = 0, 1, 2
#: ``Table.kind`` values of operator rows: a PyTorch operator (``cpu_op``) or a user annotation
#: (``record_function``: ``Optimizer.step#...``, ``enumerate(DataLoader)#...``, a module's name).
OP_OPERATOR, OP_ANNOTATION = 0, 1


@dataclass(frozen=True, eq=False)
class Table:
    """Interval events of one kind, one row per event, sorted by ``start``.

    ``name`` indexes ``names``; ``lane`` is the stream (GPU rows) or the thread (host rows);
    ``correlation`` links a runtime call to the GPU work it launched (-1: none); ``kind`` and
    ``flag`` are small codes whose meaning depends on the table (see the module constants);
    ``stack`` indexes ``stacks`` (-1: the event carried no Python call stack); ``external`` is
    the profiler's ``External id``, shared by an operator and the runtime calls and GPU work it
    launched (-1: none).
    """

    names: tuple[str, ...]
    name: np.ndarray
    start: np.ndarray
    end: np.ndarray
    lane: np.ndarray
    correlation: np.ndarray
    kind: np.ndarray
    flag: np.ndarray
    device: np.ndarray
    stack: np.ndarray
    external: np.ndarray
    stacks: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.start)

    def name_of(self, row: int) -> str:
        return self.names[int(self.name[row])]

    def stack_of(self, row: int) -> str:
        k = int(self.stack[row])
        return self.stacks[k] if k >= 0 else ""

    def take(self, rows: np.ndarray) -> Table:
        """The rows ``rows`` (a boolean mask or indices) as a new table, same names."""
        return Table(self.names, *(_ro(c[rows]) for c in (self.name, self.start, self.end, self.lane,
                                                            self.correlation, self.kind, self.flag,
                                                            self.device, self.stack, self.external)),
                     self.stacks)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class Device:
    """One GPU as ``deviceProperties`` (or the older ``computeProperties``) lists it."""

    id: int
    name: str
    vendor: str  # "nvidia", "amd" or ""
    major: int | None
    minor: int | None
    memory: int | None

    @property
    def tensor_cores(self) -> bool | None:
        """Whether fp32 matmuls leave tensor cores unused here (None: cannot tell)."""
        from pitstop.gpu import tensor_cores

        return tensor_cores(self.vendor, self.major)

    @property
    def tf32(self) -> bool:
        """Ampere or later NVIDIA: fp32 matmuls can run as TF32."""
        from pitstop.gpu import tf32_capable

        return tf32_capable(self.vendor, self.major)


@dataclass(frozen=True)
class Step:
    """One host-side ``ProfilerStep#N``."""

    number: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, eq=False)
class Timeline:
    """Everything one trace file says that the analysis uses.

    ``gpu``: kernels, memcpys and memsets (``kind``); ``runtime``: CUDA/HIP runtime and
    driver calls; ``ops``: host operators and user annotations (``cpu_op``, ``Operator``,
    ``user_annotation``) except the steps; ``python``: ``python_function`` frames;
    ``steps``: host ``ProfilerStep#N`` in order. ``schema`` is ``"2021"`` or ``"2022+"``.
    """

    source: str
    schema: str
    rank: int | None
    world_size: int | None
    backend: str
    devices: tuple[Device, ...]
    gpu: Table
    runtime: Table
    ops: Table
    python: Table
    steps: tuple[Step, ...]
    gpu_devices: tuple[int, ...]

    @property
    def device(self) -> Device | None:
        """The GPU the events ran on: the listed device of the events' id, else the first listed."""
        by_id = {d.id: d for d in self.devices}
        for dev in self.gpu_devices:
            if dev in by_id:
                return by_id[dev]
        return self.devices[0] if self.devices else None
