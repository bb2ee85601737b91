"""Synthetic many-rank jobs for the straggler model and the job view: one trace per rank,
every step ends in an all-reduce that finishes when the last rank has arrived, so the ranks
that arrive early wait inside it (the victims) for the late ones (the planted culprits)."""

from __future__ import annotations

from pathlib import Path

from trace_synth import Synth

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_bf16_s16816gemm"


def write_job(folder: Path, *, world: int, steps: int = 6, plant: dict | None = None, kernel_us: float = 6_000,
              comm_us: float = 400, jitter_us: float = 50) -> list[Path]:
    """``plant``: ``{rank: (cause, extra_us, steps)}`` with cause ``data`` (a slower
    DataLoader ``__next__``, GPU idle), ``host`` (host work before the launch, GPU idle) or
    ``compute`` (a longer kernel); ``steps`` the step indices it is late in (None: all).
    Every rank gets a small deterministic jitter (``jitter_us``) that must not count."""
    plant = plant or {}
    folder.mkdir(parents=True, exist_ok=True)
    synths = [Synth(rank=r, world=world) for r in range(world)]
    t0 = 1_000_000.0
    for k in range(steps):
        delays = {}
        for r in range(world):
            extra = {"data": 0.0, "host": 0.0, "compute": 0.0}
            if r in plant:
                cause, us, late_steps = plant[r]
                if late_steps is None or k in late_steps:
                    extra[cause] = us
            extra["compute"] += jitter_us * (((r * 7919 + k * 104729) % 13) / 12.0)
            delays[r] = extra
        arrive = {r: 10 + 100 + d["data"] + d["host"] + 10 + kernel_us + d["compute"] for r, d in delays.items()}
        last = max(arrive.values())
        step_len = last + comm_us + 100
        for r, s in enumerate(synths):
            d = delays[r]
            s.step(k + 1, t0, step_len)
            t = t0 + 10
            s.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 100 + d["data"])
            t += 100 + d["data"]
            if d["host"]:
                s.op("train.py(40): log_images", t, d["host"])
                t += d["host"]
            ext = s.op("aten::mm", t, 20)
            s.gpu(GEMM, t + 10, kernel_us + d["compute"], ext=ext)
            t += 10 + kernel_us + d["compute"]
            ext = s.op("nccl:all_reduce", t - 5, 10, cat="user_annotation")
            s.gpu(ALLREDUCE, t, (last - arrive[r]) + comm_us, stream=20, ext=ext)
        t0 += step_len + 50
    return [s.write(folder / f"rank{r}.pt.trace.json.gz") for r, s in enumerate(synths)]
