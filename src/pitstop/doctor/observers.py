"""Observers mixed into :class:`~pitstop.doctor.instrument.Instrumentation` (full mode).

Forward hooks (which model ran, in which grad/eval mode, under which autocast, with what
batch), DataLoader timing, sync and copy callbacks, per-phase CUDA peaks and the
saved-tensor pack hook that measures activations. They read and write the state that
``Instrumentation.__init__`` sets up; they hold no state of their own.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import torch

from pitstop.doctor import memory as mem
from pitstop.doctor.patching import user_site

__all__ = ["Observers", "first_tensor"]

perf = time.perf_counter


def _caller_kwargs() -> dict[str, Any]:
    """The keyword arguments of the module call being made (``model(**batch)``): global
    forward pre-hooks receive only the positional ones, so read them from
    ``Module._call_impl``'s frame."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        if f.f_code.co_name == "_call_impl":
            kw = f.f_locals.get("kwargs")
            return dict(kw) if isinstance(kw, dict) else {}
        f = f.f_back
    return {}


def first_tensor(obj: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in a (nested) batch or argument tuple."""
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 3:
        return None
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for o in obj:
            t = first_tensor(o, depth + 1)
            if t is not None:
                return t
    return None


class Observers:
    """Full-mode hooks; see the module docstring."""

    # -- forward ----------------------------------------------------------------------
    def _fwd_pre(self, module, args) -> None:
        if self.passive:
            return
        self._depth += 1
        grad = torch.is_grad_enabled()
        if self._depth == 1:
            if grad and self._cuda:
                self._cuda_phase("forward", True)
            if not self._in_backward:
                kwargs = _caller_kwargs()
                self._top_call = (args, kwargs, self._unaccounted())
                if self.sampler is not None:
                    self.sampler.close()
                    if grad:
                        self.sampler.label = "other"
                self._layout_start(module, args, kwargs)
                self._note_forward(module, args, grad)
            self._top = (perf(), grad)
        else:
            if self._depth == 2 and self._ac_pending is not None:
                self._confirm_autocast()
            if self._layout_probe is not None:
                self._layout_watch(module, args)
        if self._flow is not None and grad and self.kind() == "profiled":
            self._flow.pre(module, args)

    def _fwd_post(self, module, args, output) -> None:
        if self.passive:
            return
        if self._flow is not None and self._top[1] and self.kind() == "profiled":
            self._flow.post(module, output)
        if self._depth == 1 and not self._in_backward:
            seconds = perf() - self._top[0]
            self._layout_end(module)
            if self._top[1]:
                self.cur.phases["forward"] += seconds
                a, kw, unaccounted = self._top_call
                self._watch_forward(module, a, kw, output, seconds, self._where, unaccounted)
                if self._cuda:
                    self._cuda_phase("forward", False)
            else:
                self.cur.phases["eval"] += seconds
            if self.sampler is not None:
                self.sampler.open()
        self._depth = max(0, self._depth - 1)

    def _unaccounted(self) -> float:
        """Seconds of the current step so far that no measured phase explains."""
        measured = sum(v for k, v in self.cur.phases.items() if k != "sync")
        return perf() - self.step_start - measured

    def _note_forward(self, module, args, grad: bool) -> None:
        info = self.models.get(id(module))
        if info is None:
            info = self.models[id(module)] = self._model_info(module)
        if not grad:
            kind = "eval_inference_mode" if torch.is_inference_mode_enabled() else "eval_no_grad"
            if module.training:
                for k in ("nograd_train_mode", "train_mode_eval"):
                    self._count_forward(k)
                    info["forwards"][k] += 1
            self._count_forward(kind)
            info["forwards"][kind] += 1
            return
        # grad enabled: training or evaluation is decided by whether a backward follows (passes.py)
        self._where = user_site(3, through_torch=True) or "?"
        dev = info["device"]
        ac = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None
        self.autocast[str(ac).replace("torch.", "") if ac is not None else "none"] += 1
        # wrappers (Fabric, Accelerate, HF Trainer) enter autocast inside their forward:
        # what counts is the state the model's layers run under (checked at the first inner call)
        self._ac_pending = dev if ac is None else None
        x = first_tensor(args)
        if x is not None and self.kind() == "observed":
            self.input_shapes["x".join(map(str, x.shape))] += 1
        if not info.get("keys_done"):
            self._param_keys.update(k for p in module.parameters() if (k := mem.storage_key(p)) is not None)
            info["keys_done"] = True

    def _confirm_autocast(self) -> None:
        dev, self._ac_pending = self._ac_pending, None
        if torch.is_autocast_enabled(dev) and self.autocast["none"] > 0:
            self.autocast["none"] -= 1
            self.autocast[str(torch.get_autocast_dtype(dev)).replace("torch.", "")] += 1

    def _count_forward(self, kind: str) -> None:
        self.forwards[kind] += 1
        if kind not in self.forward_where:
            self.forward_where[kind] = user_site(3, through_torch=True) or "?"

    def _model_info(self, module) -> dict[str, Any]:
        p = next(module.parameters(), None)
        device = p.device.type if p is not None else "cpu"
        compiled = type(module).__name__ == "OptimizedModule" or hasattr(module, "_orig_mod")
        # a strong reference: the script's frames are gone by the time the report is built
        return {"ref": (lambda m=module: m), "forwards": Counter(), "device": device if device in ("cpu", "cuda") else "cpu",
                "compiled": compiled}

    # -- data ----------------------------------------------------------------------------
    def _dl_iter(self, loader):
        it = self._orig_dl_iter(loader)
        if not self.passive:
            info = self.loaders.get(id(loader))
            if info is None:
                from torch.utils.data.distributed import DistributedSampler

                sampler = getattr(loader, "sampler", None)
                bs = getattr(loader, "batch_sampler", None)
                info = self.loaders[id(loader)] = {
                    "role": "eval", "num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
                    "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor,
                    "batch_size": loader.batch_size, "sampler": type(sampler).__name__,
                    "distributed_sampler": isinstance(sampler, DistributedSampler)
                    or isinstance(getattr(bs, "sampler", None), DistributedSampler),
                    "where": user_site(2, through_torch=True)}
            if torch.is_grad_enabled():
                info["role"] = "train"
        return it

    def _dl_next(self, it):
        if self.passive:
            return self._orig_next(it)
        t0, c0 = perf(), time.process_time()
        self._in_data += 1
        try:
            return self._orig_next(it)
        finally:
            self._in_data -= 1
            train = torch.is_grad_enabled()
            self.cur.phases["data" if train else "eval"] += perf() - t0
            if train:
                self.cur.data_cpu += time.process_time() - c0
                workers = getattr(it, "_workers", None)
                if workers and self.kind() in ("warmup", "observed"):
                    self.worker_clock.add(getattr(w, "pid", None) for w in workers)

    # -- syncs, copies, activations -----------------------------------------------------------
    def _on_sync(self, kind: str, site: str, seconds: float) -> None:
        if self.passive or self._in_data or self._in_opt:
            return
        self.cur.syncs[(site, kind)] += 1
        self.cur.sync_s[(site, kind)] += seconds
        self.cur.phases["sync"] += seconds

    def _on_cuda_call(self, kind: str, site: str, seconds: float) -> None:
        if self.passive or self._in_opt:
            return
        self.cur.cuda[(site, kind)] += 1
        if kind == "cuda.synchronize":
            self._on_sync(kind, site, seconds)

    def _tensor_to(self, t, *args, **kwargs):
        t0 = perf()
        out = self._orig_to(t, *args, **kwargs)
        if not self.passive and out is not t and t.device.type == "cpu" and out.device.type == "cuda":
            self.cur.h2d["non_blocking" if kwargs.get("non_blocking") else "blocking"] += 1
            self.cur.h2d["seconds"] += perf() - t0
        return out

    def _cuda_phase(self, phase: str, start: bool) -> None:
        """On CUDA: the allocator's peak within each phase (reset at its start; no sync)."""
        if not (self._cuda and self.full and torch.cuda.is_initialized()) or self.kind() != "observed":
            return
        if start:
            self.run_peak = max(self.run_peak, torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        else:
            peak = torch.cuda.max_memory_allocated()
            self.run_peak = max(self.run_peak, peak)
            self.phase_peaks[phase] = max(self.phase_peaks.get(phase, 0), peak)

    def _pack(self, t):
        """Count the bytes autograd saves; return a detached alias (same storage, no copy).
        Returning ``t`` itself would make a saved *output* reference its own ``grad_fn``: a
        cycle that leaks every graph that is never back-propagated (eval with grad on)."""
        if not self.passive and not self._in_backward:  # (autograd packs with grad mode off)
            key = mem.storage_key(t)
            if key is not None and key not in self._param_keys and key not in self._acts:
                try:
                    self._acts[key] = t.untyped_storage().nbytes()
                except Exception:
                    pass
        return t.detach()
