"""A small factory of synthetic doctor :class:`~pitstop.doctor.Observations` for check tests.

The helpers build the typed records of :mod:`pitstop.doctor.analysis.records` (``model()`` a
:class:`ModelRecord`, ``probe()`` a :class:`ProbeResult`, ...); ``observations()`` takes
them, or any field in its JSON form (``memory={"peak": ...}``, as ``--format json``
writes it), and reads the whole through ``Observations.from_dict``, the path the doctor's
parent takes. The defaults describe a healthy CPU run of 5 observed steps of 100 ms with
no loader, no optimizer and no model: a test adds only what its check looks at.
"""

from __future__ import annotations

from typing import Any

from pitstop.doctor.analysis.check import Finding, Thresholds
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.probe_records import ProbeResult
from pitstop.doctor.analysis.records import LoaderRecord, ModelRecord, OptimizerRecord, Site
from pitstop.jsoncodec import from_json, to_json

__all__ = ["observations", "model", "optimizer", "loader", "site", "probe", "run_check", "findings_of"]

STEP = 0.1  # seconds: the mean step time of every synthetic run


def observations(*, device: str = "cpu", breakdown: dict[str, float] | None = None, **fields: Any) -> Observations:
    """A run of 5 observed steps of :data:`STEP` seconds; ``breakdown`` gives seconds per
    phase (the rest of the step is "other"); ``settings`` and ``forwards`` update the
    defaults key by key; any other field is passed through."""
    phases = {"data": 0.0, "forward": 0.04, "backward": 0.04, "optimizer": 0.01, "eval": 0.0}
    phases.update(breakdown or {})
    phases["other"] = max(STEP - sum(phases.values()), 0.0)
    d: dict[str, Any] = {
        "device": device,
        "device_name": "NVIDIA A100-SXM4-80GB" if device == "cuda" else "x86-64-v3",
        "capability": [8, 0] if device == "cuda" else None,
        "steps_observed": 5,
        "batch_size": 32,
        "step_time": {"median": STEP, "p90": STEP, "mean": STEP, "min": STEP, "max": STEP},
        "breakdown": phases,
        "settings": {"num_threads": 2, "cpu_cores": 4, "world_size": 1,
                     "float32_matmul_precision": "highest", "tf32_matmul": False},
        "forwards": {"train": 5, "autocast": {"none": 5}},
    }
    for merged in ("settings", "forwards"):
        d[merged].update(fields.pop(merged, {}))
    d.update(fields)
    return Observations.from_dict(to_json(d))


def model(cls: str = "Net", **fields: Any) -> ModelRecord:
    """One top-level model record (``Observations.models``); ``fields`` in their JSON form."""
    return from_json(ModelRecord, {"class": cls, "params": 1000, "trainable": 1000, "param_dtype": "float32", "dataparallel": False,
            "ddp": False, "compiled": False, "mode_dependent": False, "conv2d": 0, "conv_bias_bn": [],
            "linear_linear": [], "odd_sizes": [], "forwards": {"train": 5}, **fields})


def optimizer(cls: str = "AdamW", **fields: Any) -> OptimizerRecord:
    """One optimizer record (``Observations.optimizers``)."""
    return from_json(OptimizerRecord, {"class": cls, "mode": "foreach", "fused_available": True, "params": 4, "param_bytes": 4000,
            "state_bytes": 8000, "state_ratio": 2.0, "options": {"lr": 1e-3}, "frozen_params": 0,
            "frozen_numel": 0, "decay_1d_params": 0, "decay_1d_numel": 0, "weight_decay": 0.0, **fields})


def loader(role: str = "train", **fields: Any) -> LoaderRecord:
    """One DataLoader record (``Observations.loaders``)."""
    return from_json(LoaderRecord, {"role": role, "num_workers": 0, "pin_memory": False, "persistent_workers": False,
            "prefetch_factor": None, "batch_size": 32, "sampler": "RandomSampler",
            "distributed_sampler": False, "where": "train.py:10", **fields})


def site(kind: str, *, every: int = 5, calls: int | None = None, seconds: float = 0.0,
         where: str = "train.py:20") -> Site:
    """One call site of a sync or CUDA call (``Observations.syncs`` / ``cuda_calls``),
    seen in ``every`` of the 5 observed steps."""
    return Site(where=where, kind=kind, calls=every if calls is None else calls, steps_with_calls=every,
                seconds=seconds)


def probe(baseline: str, candidate: str, low: float, *, ratio: float | None = None,
          high: float | None = None, **fields: Any) -> ProbeResult:
    """A probe result (``Observations.probes[key]``) where ``candidate`` beats ``baseline``
    by ``ratio`` with interval [low, high]."""
    ratio = ratio if ratio is not None else low + 0.2
    high = high if high is not None else ratio + 0.2
    return from_json(ProbeResult, {"what": "Net fwd+bwd on a batch of 32", "baseline": baseline,
            "seconds": {baseline: 0.01 * ratio, candidate: 0.01}, "runs": 12,
            "speedups": {candidate: {"ratio": ratio, "low": low, "high": high}},
            "candidate": candidate, "speedup": ratio, "interval": [low, high], "confidence": 0.9,
            "compute_only": True, **fields})


def run_check(check_cls: type, obs: Observations, th: Thresholds | None = None) -> tuple[str | None, list[Finding]]:
    """What the doctor does with one check: its skip reason, else its findings."""
    check = check_cls()
    reason = check.skip_reason(obs)
    if reason:
        return reason, []
    return None, list(check.check(obs, th or Thresholds()))


def findings_of(check_cls: type, obs: Observations, th: Thresholds | None = None) -> list[Finding]:
    return run_check(check_cls, obs, th)[1]
