"""Turn the instrumentation's raw state into :class:`Observations` (plus the probes).

Called once, after the instrumentation is uninstalled (so that the probes' own forward
passes and optimizer steps are not measured as the script's).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import platform
import shutil
import sys
import time
from typing import Any

import torch
from torch import nn

from pitstop.doctor.record import frameworks
from pitstop.doctor.record import memory as mem
from pitstop.doctor.analysis.compile_records import CompileRecord
from pitstop.doctor.record.instrument import Instrumentation
from pitstop.doctor.record.oom.precision import memory_profile
from pitstop.doctor.analysis.observations import Observations
from pitstop.gpu import cuda_device, peak_for
from pitstop.doctor.analysis.probe_records import ProbeResult
from pitstop.doctor.analysis.records import (H2D, BatchRecord, Breakdown, Flops, ForwardCounts,
                                    Forwards, FrameworkRecord, GraphRecord, Kernels, LinearPair, LoaderRecord,
                                    MemoryRecord, ModelRecord, OddSize, OptimizerRecord, Overhead,
                                    SampledSite, Settings, Site, StepTime)
from pitstop.jsoncodec import from_json
from pitstop.machine import usable_cores
from pitstop.stats import median

__all__ = ["observations", "device_of"]

_MEASURED = ("data", "host", "forward", "backward", "optimizer", "eval")


def _models(inst: Instrumentation) -> list[tuple[nn.Module, dict[str, Any]]]:
    out = []
    for info in inst.models.values():
        m = info["ref"]()
        if m is not None and next(m.parameters(), None) is not None:
            out.append((m, info))
    return sorted(out, key=lambda mi: -sum(p.numel() for p in mi[0].parameters()))


def device_of(inst: Instrumentation) -> str:
    models = _models(inst)
    if models:
        return models[0][1]["device"]
    for opt in inst.optimizers.values():
        for g in opt.param_groups:
            for p in g["params"]:
                return "cuda" if p.is_cuda else "cpu"
    return "cpu"


def _slope(ys: list[float]) -> float | None:
    n = len(ys)
    if n < 2:
        return None
    mx, my = (n - 1) / 2, sum(ys) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / den


def _optimizer_mode(opt) -> str:
    g = opt.param_groups[0]
    if g.get("fused"):
        return "fused"
    if g.get("foreach"):
        return "foreach"
    if g.get("foreach") is None and not g.get("differentiable"):
        from torch.optim.optimizer import _default_to_fused_or_foreach

        _, foreach = _default_to_fused_or_foreach([p for p in g["params"]], False, False)
        return "foreach" if foreach else "for-loop"
    return "for-loop"


def _options(opt) -> dict[str, Any]:
    """The first param group's JSON-able options (lr, momentum, amsgrad, ...), for checks."""
    g = opt.param_groups[0] if opt.param_groups else {}
    out: dict[str, Any] = {}
    for k, v in g.items():
        if k == "params":
            continue
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, tuple) and all(isinstance(x, (int, float)) for x in v):
            out[k] = list(v)
    return out


def _optimizer_info(opt) -> OptimizerRecord:
    params = [p for g in opt.param_groups for p in g["params"]]
    pbytes = mem.param_bytes(params)
    sbytes = mem.state_bytes(opt)
    decay_1d = [(p, g.get("weight_decay", 0)) for g in opt.param_groups if g.get("weight_decay", 0)
                for p in g["params"] if p.dim() <= 1 and p.requires_grad]
    frozen = [p for p in params if not p.requires_grad]
    sig = inspect.signature(type(opt).__init__).parameters
    return OptimizerRecord(
        cls=type(opt).__name__, mode=_optimizer_mode(opt), fused_available="fused" in sig,
        params=len(params), param_bytes=pbytes, state_bytes=sbytes,
        state_ratio=sbytes / pbytes if pbytes else None, options=_options(opt),
        frozen_params=len(frozen), frozen_numel=sum(p.numel() for p in frozen),
        decay_1d_params=len(decay_1d), decay_1d_numel=sum(p.numel() for p, _ in decay_1d),
        weight_decay=max((wd for _, wd in decay_1d), default=0.0))


def _odd_sizes(model: nn.Module) -> list[OddSize]:
    out = []
    for name, m in model.named_modules():
        dims: dict[str, int] = {}
        if isinstance(m, nn.Linear):
            dims = {"in_features": m.in_features, "out_features": m.out_features}
        elif isinstance(m, nn.modules.conv._ConvNd):
            dims = {"in_channels": m.in_channels, "out_channels": m.out_channels}
        elif isinstance(m, nn.Embedding):
            if m.num_embeddings % 64:
                out.append(OddSize(module=name, type="Embedding", sizes={"num_embeddings": m.num_embeddings},
                                   multiple=64))
            dims = {"embedding_dim": m.embedding_dim}
        bad = {k: v for k, v in dims.items() if v % 8 and v > 8}
        if bad:
            out.append(OddSize(module=name, type=type(m).__name__, sizes=bad, multiple=8))
    return out


def _model_info(model: nn.Module, info: dict[str, Any], flow=None) -> ModelRecord:
    params = list(model.parameters())
    p0 = params[0]
    from pitstop.doctor.record.wrappers import wrapper_chain

    chain = wrapper_chain(model)  # outermost wrapper first, the user's module last
    compiled = bool(info.get("compiled"))
    conv_bias_bn = [tuple(p) for p in flow.conv_bias_bn] if flow else []
    if compiled and not conv_bias_bn:  # module hooks do not fire in graphs
        from pitstop.doctor.record.wrappers import sequential_conv_bias_bn

        conv_bias_bn = [tuple(p) for p in sequential_conv_bias_bn(model)]
    return ModelRecord(
        cls=chain[-1], wrapped_by=chain[:-1], params=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
        param_dtype=str(p0.dtype).replace("torch.", ""), device=info["device"],
        dataparallel=isinstance(model, nn.DataParallel),
        ddp=isinstance(model, nn.parallel.DistributedDataParallel),
        compiled=compiled, compiled_function=bool(info.get("compiled_function")),
        mode_dependent=any(isinstance(m, (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm))
                           for m in model.modules()),
        conv2d=sum(isinstance(m, nn.Conv2d) for m in model.modules()),
        forwards=from_json(ForwardCounts, dict(info["forwards"])), odd_sizes=_odd_sizes(model),
        conv_bias_bn=conv_bias_bn,
        linear_linear=from_json(list[LinearPair], flow.linear_linear) if flow else [])


def _settings() -> Settings:
    b = torch.backends
    return Settings(cudnn_benchmark=bool(b.cudnn.benchmark), cudnn_deterministic=bool(b.cudnn.deterministic),
                    tf32_matmul=bool(b.cuda.matmul.allow_tf32), tf32_cudnn=bool(b.cudnn.allow_tf32),
                    float32_matmul_precision=torch.get_float32_matmul_precision(),
                    deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
                    num_threads=torch.get_num_threads(), cpu_cores=usable_cores(), world_size=_world_size())


def _world_size() -> int | None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return None


def _steps_stats(inst: Instrumentation) -> tuple[StepTime | None, Breakdown | None]:
    obs = [r for r in inst.records if r.kind == "observed"]
    if not obs:
        return None, None
    step_time = StepTime.of([r.wall for r in obs])
    n = len(obs)
    measured = {ph: sum(r.phases.get(ph, 0.0) for r in obs) / n for ph in _MEASURED}
    return step_time, Breakdown(**measured, other=max(0.0, step_time.mean - sum(measured.values())))


def _sites(table: dict[tuple[str, str], list[float]], via: dict[str, str] | None = None) -> list[Site]:
    via = via or {}
    rows = [Site(where=site, kind=kind, calls=int(v[0]), steps_with_calls=int(v[1]), seconds=v[2], via=via.get(site))
            for (site, kind), v in table.items()]
    return sorted(rows, key=lambda r: -r.calls)


def observations(inst: Instrumentation, *, probes: bool = True, probe_budget: float = 1.0,
                 cpuinfo: str | None = None) -> Observations:
    if inst.full:
        inst.settle_all()
    device = device_of(inst)
    models = _models(inst)
    step_time, breakdown = _steps_stats(inst)
    n_obs = sum(1 for r in inst.records if r.kind == "observed")
    o = Observations(device=device, steps_observed=n_obs, step_time=step_time, breakdown=breakdown,
                     batch_size=inst.batch_size, backward_calls=inst.backward_total,
                     scaler_calls=inst.scaler_calls, notes=list(inst.notes),
                     distributed=inst.dist.record() if inst.dist is not None else None)
    if device == "cuda":
        gpu = cuda_device()
        o.device_name, o.capability = gpu.name, list(gpu.capability)
    from pitstop.machine import cpu_features

    o.processor = cpu_features(cpuinfo)
    if device != "cuda":
        c = o.processor.cap
        cap = f"; oneDNN capped at {c}" if c else ""
        cap += f"; CPU described by {o.processor.source}" if o.processor.injected else ""
        o.device_name = (f"{platform.machine()} CPU ({torch.backends.cpu.get_cpu_capability()}{cap}), "
                         f"{torch.get_num_threads()} threads")
    o.capacity = mem.capacity_bytes(device)
    o.syncs = _sites(inst.sync_sites, inst.sync.via)
    o.cuda_calls = _sites(inst.cuda_sites)
    o.optimizers = [_optimizer_info(opt) for opt in inst.optimizers.values()]
    flow = inst.profiled.flow  # the data flow of the primary model's training forward
    o.models = [_model_info(m, info, flow if i == 0 else None) for i, (m, info) in enumerate(models)]
    o.loaders = [from_json(LoaderRecord, dict(d)) for d in inst.loaders.values()]
    o.forwards = from_json(Forwards, {**dict(inst.forwards), "where": dict(inst.forward_where),
                                      "autocast": dict(inst.autocast)})
    o.kernels = from_json(Kernels, {**inst.profile_result.get("kernels", {}),
                                    "conv_input_shapes": dict(inst.input_shapes)})
    o.settings = _settings()
    o.graph = from_json(GraphRecord | None, dict(inst.graph))
    o.h2d = H2D(**{k: v / n_obs for k, v in inst.h2d.items()}) if n_obs and inst.h2d else None
    o.memory = _memory(inst, device, models)
    o.memory_profile = memory_profile(inst, models, o.autocast_dtype)
    o.flops = _flops(inst, o)
    o.compile = _compile_info(inst, models)
    o.overhead = _overhead(inst)
    o.framework = from_json(FrameworkRecord, (inst.framework or frameworks.detect_imports()).to_dict())
    o.batch = _batch(inst, models)
    if o.batch:
        o.batch_size = o.batch.size
    from pitstop.doctor.record.cores import cpu_record

    o.cpu = cpu_record(inst, o)
    o.step_boundary = inst.boundary or ("optimizer.step" if inst.primary is not None else None)
    if inst.sampler is not None:
        via = inst.sampler.via
        o.host_sites = [SampledSite(where=w, share=sh, samples=n, via=via.get(w)) for w, sh, n in inst.sampler.top("host")]
        o.other_sites = [SampledSite(where=w, share=sh, samples=n, via=via.get(w))
                         for w, sh, n in inst.sampler.top("other")]
    from pitstop.doctor.record.cores import busy_note

    note = busy_note(o.cpu)
    if note:
        o.notes.append(note)
    _periodic(inst, o)
    if device == "cuda":
        _gpu_evidence(inst, o)
    if probes and n_obs:
        o.probes = _probes(inst, o, models, probe_budget)
    return o


def _periodic(inst: Instrumentation, o: Observations) -> None:
    """Evaluation and checkpoints, amortised over their period (the report shows them under the breakdown)."""
    if inst.periodic is not None:
        from pitstop.doctor.record.periodic import periodic_records

        o.periodic = periodic_records(inst.periodic, inst.log, max(0.0, o.mean_step - o.seconds("eval")) or None)


def _gpu_evidence(inst: Instrumentation, o: Observations) -> None:
    """``o.gpu``: the profiled steps' trace analysed by :mod:`pitstop.trace` (the doctor's own
    trace file is removed once read), and what the profiled window cost, in the notes."""
    path = inst.trace_path
    if not path:
        o.notes.append("no profiled GPU steps (the script ended before them): the GPU findings rest on host timers")
        return
    from pitstop.doctor.analysis.evidence import profiled_window

    t0 = time.perf_counter()
    o.gpu, why = profiled_window(path)
    traced = [r.wall for r in inst.records if r.kind == "traced"]
    observed = o.step_time.median if o.step_time is not None else None
    slower = (f" ({median(traced) / observed:.1f}x the observed step's median under the profiler: the findings "
              "re-base the GPU shares on the observed step)" if traced and observed else "")
    o.notes.append(why or f"GPU evidence: {len(traced)} profiled steps after the observed ones took "
                          f"{sum(traced):.2f} s{slower}, analysing their trace {time.perf_counter() - t0:.2f} s")
    if inst.profiled.own_trace:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        inst.profiled.trace_path = None


def _batch(inst: Instrumentation, models) -> BatchRecord | None:
    """The primary model's batch and what it consumed per observed step (all of its
    training forwards: gradient accumulation counts every micro-batch)."""
    mid = id(models[0][0]) if models else next(iter(inst.batches), None)
    b = inst.batches.get(mid)
    if b is None:
        return None
    obs = [r for r in inst.records if r.kind == "observed"]
    for r in inst.records:
        s, t, f = inst.per_step.get(r.index, {}).get(mid, (0, 0, 0))
        r.samples, r.tokens, r.micro_batches = s, (t if b.tokens is not None else None), f
    n = len(obs)
    per = (lambda key: sum(getattr(r, key) or 0 for r in obs) / n) if n else (lambda key: None)
    return BatchRecord(size=b.size, dim=b.dim, input=b.name, how=b.how, tokens=b.tokens,
                       samples_per_step=per("samples"),
                       tokens_per_step=per("tokens") if b.tokens is not None else None,
                       micro_batches_per_step=per("micro_batches"))


def _memory(inst: Instrumentation, device: str, models) -> MemoryRecord:
    params = {id(p): p for m, _ in models for p in m.parameters()}
    for opt in inst.optimizers.values():
        params.update({id(p): p for g in opt.param_groups for p in g["params"]})
    acts = sorted(inst.activations)
    samples = [r.memory for r in inst.records if r.kind == "observed" and r.memory is not None]
    if device == "cuda" and torch.cuda.is_initialized():
        peak = max(int(torch.cuda.max_memory_allocated()), inst.run_peak)
        source = "cuda max_memory_allocated"
    else:
        peak, source = mem.peak_rss_bytes(), "process peak RSS"
    return MemoryRecord(params=mem.param_bytes(params.values()), grads=inst.grad_bytes,
                        optimizer_state=sum(mem.state_bytes(o) for o in inst.optimizers.values()),
                        activations=acts[len(acts) // 2] if acts else None, peak=peak, peak_source=source,
                        capacity=mem.capacity_bytes(device), growth_per_step=_slope(samples), samples=samples,
                        phase_peaks=dict(inst.phase_peaks))


def _flops(inst: Instrumentation, o: Observations) -> Flops:
    total = inst.profile_result.get("flops")
    if not total or not o.step_time:
        return Flops(per_step=total, peak_source="not measured")
    achieved = total / o.step_time.median
    peak, source = (None, "MFU needs a known GPU (n/a on CPU)")
    if o.on_cuda:
        kinds = o.kernels.matmul | o.kernels.conv
        dtype = max(kinds, key=kinds.__getitem__) if kinds else "float32"
        if dtype == "float32" and o.settings.float32_matmul_precision != "highest":
            dtype = "tf32"
        peak, source = peak_for(o.device_name, dtype)
    return Flops(per_step=total, achieved_per_s=achieved, peak_per_s=peak, mfu=achieved / peak if peak else None,
                 peak_source=source)


def _compile_info(inst: Instrumentation, models) -> CompileRecord:
    """What dynamo reported (:mod:`pitstop.doctor.record.compile_watch`); ``calls``: forwards of the
    compiled models, seen at their boundary."""
    compiled = [info for _, info in models if info.get("compiled")]
    calls = sum(sum(info["forwards"].get(k, 0) for k in ("train", "eval_no_grad", "eval_inference_mode", "eval_with_grad"))
                for info in compiled)
    rec = inst.compile_watch.record(bool(compiled), calls)
    if not rec.compiled:
        return rec
    c_obs, r_obs = inst.graph_calls.per_step("observed")
    c_pair, r_pair, c_bare, r_bare = inst.graph_calls.paired()
    return dataclasses.replace(rec, calls_per_step=c_obs, replays_per_step=r_obs, paired_calls_per_step=c_pair,
                               paired_replays_per_step=r_pair, bare_calls_per_step=c_bare, bare_replays_per_step=r_bare)


def _overhead(inst: Instrumentation) -> Overhead | None:
    """The bare steps against the observed step before each (see :class:`Overhead`)."""
    recs = inst.records
    pairs = [(recs[i - 1], r) for i, r in enumerate(recs)
             if r.kind == "bare" and i and recs[i - 1].kind == "observed" and r.wall > 0]
    if not pairs:
        return None
    ratios = [a.wall / b.wall for a, b in pairs]
    cpu = [(a.cpu, b.cpu) for a, b in pairs if a.cpu is not None and b.cpu is not None]
    return Overhead(pairs=len(pairs), observed=median([a.wall for a, _ in pairs]),
                    bare=median([b.wall for _, b in pairs]), low=min(ratios), high=max(ratios),
                    observed_cpu=median([a for a, _ in cpu]) if cpu else None,
                    bare_cpu=median([b for _, b in cpu]) if cpu else None)


def _probes(inst: Instrumentation, o: Observations, models, budget: float) -> dict[str, ProbeResult]:
    """The registered probes (face D), on copies of the primary model and its last batch."""
    from pitstop.doctor.record.probing.run import run_probes

    model, info = models[0] if models else (None, {})
    args = inst.last_train_args.get(id(model)) if model is not None else None
    kwargs = inst.last_train_kwargs.get(id(model)) if model is not None else None
    dim = inst.train_layout.get(id(model), 0) if model is not None else 0
    wrapped, model = model, frameworks.unwrap(model)  # probe the user's module, not Fabric's/DDP's wrapper
    compiled = bool(info.get("compiled")) and not info.get("compiled_function")  # the module itself is compiled
    return run_probes(o, model=model, args=args, kwargs=kwargs, batch_dim=dim, compiled=compiled,
                      optimizers=list(inst.optimizers.values()), budget_s=budget, wrapped=wrapped)
