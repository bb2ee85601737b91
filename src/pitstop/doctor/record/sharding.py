"""The sharded-model recorder (one rank of a torchrun job): FSDP2 ``fully_shard`` and FSDP1
``FullyShardedDataParallel``, their units, settings and collectives (PIT705, PIT706).

Part of :class:`~pitstop.doctor.record.distributed.DistRecorder`, which wraps the
``torch.distributed`` collectives: a call to an all-gather or a reduce-scatter whose caller is
FSDP's own code (a module under ``torch.distributed.fsdp``) is FSDP's (FSDP2:
``all_gather_single`` / ``reduce_scatter_single``; FSDP1: ``all_gather`` on CPU,
``all_gather_single`` elsewhere, ``reduce_scatter_single``). Each is noted here with its
kind, duration (a blocking call: the compute waited for all of it), bytes and whether it ran
inside backward (autograd's current graph task); FSDP2's unit is the parameter group whose
``unshard`` / ``post_backward`` is running (both wrapped). The units and settings are read at
the end from the FSDP2 parameter groups and FSDP1 modules created while the script ran
(their constructors wrapped: whatever name the script imported ``fully_shard`` under).
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import torch

from pitstop.doctor.analysis.dist_records import ShardRecord, ShardUnit
from pitstop.doctor.record.patching import Patches, as_method
from pitstop.doctor.record.steps import StepLog

__all__ = ["ShardRecorder", "GATHERS", "SCATTERS"]

perf = time.perf_counter

#: FSDP's all-gather / reduce-scatter collectives (``torch.distributed`` names)
GATHERS = ("all_gather_single", "all_gather_into_tensor", "_all_gather_base", "all_gather")
SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base")
_FSDP = "torch.distributed.fsdp"


def _dtype(d: Any) -> str | None:
    return str(d).replace("torch.", "") if d is not None else None


def _nbytes(t: Any) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel() * t.element_size()
    if isinstance(t, (list, tuple)):
        return sum(_nbytes(x) for x in t)
    return 0


class ShardRecorder:
    """See the module docstring."""

    def __init__(self, log: StepLog) -> None:
        self.log = log
        self.groups: list[weakref.ref] = []   # FSDP2 FSDPParamGroup
        self.modules: list[weakref.ref] = []  # FSDP1 FullyShardedDataParallel
        self.unit: str | None = None
        self.async_calls = 0
        self._step = self._zero()
        self.per_step: dict[str, list] = {k: [] for k in self._zero()}
        self.per_unit: dict[str, list[float]] = {}  # name -> [all-gather s, reduce-scatter s, all-gathers]

    @staticmethod
    def _zero() -> dict[str, float]:
        return dict.fromkeys(("all_gather_s", "reduce_scatter_s", "all_gather_bytes", "reduce_scatter_bytes",
                              "all_gathers", "reduce_scatters", "forward_wait", "backward_wait"), 0)

    # -- install -------------------------------------------------------------------------
    def install(self, patches: Patches) -> None:
        try:
            from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        except ImportError:  # an older torch: FSDP2 units are not named
            FSDPParamGroup = None
        if FSDPParamGroup is not None:
            init = patches.set(FSDPParamGroup, "__init__", as_method(self._group_init))
            self._orig = {"group_init": init,
                          "unshard": patches.set(FSDPParamGroup, "unshard", as_method(self._in_unit("unshard"))),
                          "post_backward": patches.set(FSDPParamGroup, "post_backward",
                                                       as_method(self._in_unit("post_backward")))}
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel
        except ImportError:
            return
        self._orig1 = patches.set(FullyShardedDataParallel, "__init__", as_method(self._fsdp1_init))

    def _group_init(self, group, *args, **kwargs):
        self._orig["group_init"](group, *args, **kwargs)
        self.groups.append(weakref.ref(group))

    def _fsdp1_init(self, module, *args, **kwargs):
        self._orig1(module, *args, **kwargs)
        self.modules.append(weakref.ref(module))

    def _in_unit(self, name: str):
        def call(group, *args, **kwargs):
            outer, self.unit = self.unit, getattr(group, "_module_fqn", None) or ""
            try:
                return self._orig[name](group, *args, **kwargs)
            finally:
                self.unit = outer
        return call

    # -- the collectives -------------------------------------------------------------------
    @staticmethod
    def kind_of(name: str, caller: str) -> str | None:
        """``"all_gather"`` / ``"reduce_scatter"`` for FSDP's own calls, else None."""
        if not caller.startswith(_FSDP):
            return None
        return "all_gather" if name in GATHERS else "reduce_scatter" if name in SCATTERS else None

    def note(self, kind: str, seconds: float, args: tuple, kwargs: dict) -> None:
        """One FSDP collective of an observed step (``seconds``: None for an async call)."""
        if seconds is None:
            self.async_calls += 1
            return
        st = self._step
        out = args[0] if args else kwargs.get("output_tensor", kwargs.get("output", kwargs.get("tensor_list")))
        inp = args[1] if len(args) > 1 else kwargs.get("input_tensor", kwargs.get("input", kwargs.get("tensor")))
        if kind == "all_gather":
            st["all_gather_s"] += seconds
            st["all_gathers"] += 1
            st["all_gather_bytes"] += _nbytes(out)
        else:
            st["reduce_scatter_s"] += seconds
            st["reduce_scatters"] += 1
            st["reduce_scatter_bytes"] += _nbytes(inp)
        st["backward_wait" if torch._C._current_graph_task_id() != -1 else "forward_wait"] += seconds
        if self.unit is not None:
            row = self.per_unit.setdefault(self.unit, [0.0, 0.0, 0.0])
            row[0 if kind == "all_gather" else 1] += seconds
            row[2] += kind == "all_gather"

    def wait(self) -> float:
        """FSDP's collective seconds in the step so far (part of the rank's collective waits)."""
        return self._step["all_gather_s"] + self._step["reduce_scatter_s"]

    def end_step(self, kind: str) -> None:
        if kind == "observed":
            for k, v in self._step.items():
                self.per_step[k].append(v)
        self._step = self._zero()

    # -- the record ----------------------------------------------------------------------------
    def record(self) -> ShardRecord | None:
        groups = [g for g in (r() for r in self.groups) if g is not None]
        modules = [m for m in (r() for r in self.modules) if m is not None]
        if not groups and not modules:
            return None
        steps = max(1, len(self.per_step["all_gathers"]))
        try:
            info = self._fsdp2(groups, steps) if groups else self._fsdp1(modules, steps)
        except Exception as exc:  # noqa: BLE001 - FSDP internals moved: keep the timings, say why
            info = {"framework": "fsdp2" if groups else "fsdp1", "sharding": f"unknown ({type(exc).__name__})"}
        ps = self.per_step
        return ShardRecord(**info, all_gather_s=tuple(ps["all_gather_s"]), reduce_scatter_s=tuple(ps["reduce_scatter_s"]),
                           all_gather_bytes=tuple(int(x) for x in ps["all_gather_bytes"]),
                           reduce_scatter_bytes=tuple(int(x) for x in ps["reduce_scatter_bytes"]),
                           all_gathers=tuple(int(x) for x in ps["all_gathers"]),
                           reduce_scatters=tuple(int(x) for x in ps["reduce_scatters"]),
                           forward_wait=tuple(ps["forward_wait"]), backward_wait=tuple(ps["backward_wait"]),
                           async_calls=self.async_calls)

    def _timing(self, name: str, steps: int) -> dict[str, float]:
        ag, rs, n = self.per_unit.get(name, (0.0, 0.0, 0.0))
        return {"all_gather_s": ag / steps, "reduce_scatter_s": rs / steps, "all_gathers": n / steps}

    def _fsdp2(self, groups: list, steps: int) -> dict[str, Any]:
        from pitstop.engine.sharded import shard_blocks

        units, root, world = [], None, 1
        for g in groups:
            name = getattr(g, "_module_fqn", None) or ""
            params = g.fsdp_params
            state = g.modules[0]._get_fsdp_state() if g.modules else None
            fwd = tuple(getattr(s._fsdp_param_group, "_module_fqn", "") or "" for s in
                        getattr(state, "_states_to_forward_prefetch", ()) if s._fsdp_param_group is not None)
            bwd = tuple(getattr(s._fsdp_param_group, "_module_fqn", "") or "" for s in
                        getattr(state, "_states_to_backward_prefetch", ()) if s._fsdp_param_group is not None)
            units.append(ShardUnit(
                name=name, numel=sum(p._orig_size.numel() for p in params),
                full_bytes=sum(p._orig_size.numel() * p.orig_dtype.itemsize for p in params),
                local_bytes=sum(p._sharded_param_data.numel() * p._sharded_param_data.element_size() for p in params),
                reshard_after_forward=g.post_forward_mesh_info is not None, forward_prefetch=fwd,
                backward_prefetch=bwd, **self._timing(name, steps)))
            if name == "" and g.modules:
                root = g.modules[0]
            world = max(world, g.mesh_info.shard_mesh_size)
        units.sort(key=lambda u: (u.name != "", 0))
        first = groups[0]
        replicated = 0
        if root is not None:
            replicated = sum(p.numel() * p.element_size() for p in root.parameters() if type(p).__name__ != "DTensor")
        return {"framework": "fsdp2", "world_size": world, "units": tuple(units),
                "blocks": tuple(shard_blocks(root)) if root is not None else (),
                "stored_dtype": _dtype(first._orig_dtype) or "", "param_dtype": _dtype(first.mp_policy.param_dtype),
                "reduce_dtype": _dtype(first.mp_policy.reduce_dtype), "sharding": "FULL_SHARD",
                "local_param_bytes": sum(u.local_bytes for u in units), "full_param_bytes": sum(u.full_bytes for u in units),
                "replicated_param_bytes": replicated}

    def _fsdp1(self, modules: list, steps: int) -> dict[str, Any]:
        from pitstop.engine.sharded import shard_blocks

        root = next((m for m in modules if getattr(m, "_is_root", False)), modules[0])
        names = {id(m): n.replace("_fsdp_wrapped_module.", "").replace("._fsdp_wrapped_module", "")
                 for n, m in root.named_modules()}
        units = []
        for m in modules:
            flat = getattr(m, "_flat_param", None)
            if flat is None:
                continue
            numel = int(sum(flat._numels)) if getattr(flat, "_numels", None) else flat.numel()
            units.append(ShardUnit(
                name=names.get(id(m), "?"), numel=numel, full_bytes=numel * flat.element_size(),
                local_bytes=flat.numel() * flat.element_size(),
                reshard_after_forward=m.sharding_strategy.name in ("FULL_SHARD", "HYBRID_SHARD"),
                **self._timing(names.get(id(m), "?"), steps)))
        mp = getattr(root, "mixed_precision", None)
        bp = getattr(root, "backward_prefetch", None)
        inner = getattr(root, "_fsdp_wrapped_module", root)
        return {"framework": "fsdp1", "world_size": int(root.world_size), "units": tuple(units),
                "blocks": tuple(shard_blocks(inner)), "stored_dtype": _dtype(root._flat_param.dtype) if root._flat_param is
                not None else "", "param_dtype": _dtype(getattr(mp, "param_dtype", None)),
                "reduce_dtype": _dtype(getattr(mp, "reduce_dtype", None)), "sharding": root.sharding_strategy.name,
                "backward_prefetch": bp.name if bp is not None else None,
                "forward_prefetch": bool(getattr(root, "forward_prefetch", False)),
                "local_param_bytes": sum(u.local_bytes for u in units), "full_param_bytes": sum(u.full_bytes for u in units)}
