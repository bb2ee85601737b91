"""PIT701 no-dataparallel: one process per device with DistributedDataParallel, not nn.DataParallel."""

from __future__ import annotations

from pitstop.catalog import Tip


class NoDataparallel(Tip):
    code = "PIT701"
    slug = "no-dataparallel"
    title = "nn.DataParallel where DistributedDataParallel launched by torchrun is faster"
    faces = "LDE"
    seeds = ("002", "003")
    truth = (
        "Seeds 002 and 003 are right, and PyTorch's own docs agree: use DistributedDataParallel "
        "instead of DataParallel for multi-GPU training, even on a single node. One correction "
        "to seed 002: DDP does not split the data by itself. Every process iterates the whole "
        "dataset unless its DataLoader uses a `DistributedSampler` (PIT703). DDP is not "
        "GPU-only: with the gloo backend it runs across CPU processes (checked here with two "
        "gloo processes on CPU)."
    )

    what = """
        Flags every `nn.DataParallel(...)` call and its functional form
        `nn.parallel.data_parallel(module, input, device_ids)`, matched by qualified name through
        imports and aliases (`from torch.nn import DataParallel as DP`). It reports at the call and offers
        no fix: moving to DDP means one process per device, a launcher and a sampler, not a
        one-line edit. At run time the doctor reports when the model being trained is wrapped
        in `DataParallel`.
    """
    why = """
        DataParallel is a single process that drives all GPUs from Python threads. On every
        forward it replicates the module from the first device to the others, scatters the
        batch, and gathers the outputs back onto the first device; in backward the gradients
        are summed into the original module there. The threads contend for the GIL, and the
        first device does extra work and holds extra memory every step.

        DistributedDataParallel runs one process per device, each with its own copy of the
        model built once. During backward it all-reduces gradients in buckets, overlapping the
        communication with the rest of the backward pass, so no device is a hub and no GIL is
        shared. The DDP tutorial lists these reasons for DataParallel being usually slower,
        even on one machine: GIL contention, the per-iteration model replication, and the cost
        of scattering inputs and gathering outputs.
    """
    example = """
        ```python
        model = nn.DataParallel(model).cuda()
        for x, y in loader:
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        ```
    """
    use_instead = """
        ```python
        # train.py, launched with:  torchrun --nproc_per_node=4 train.py
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("nccl")          # "gloo" for CPU processes
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(model.to(local_rank), device_ids=[local_rank])
        sampler = DistributedSampler(dataset, shuffle=True)       # PIT703
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                ...
        dist.destroy_process_group()
        ```
        `batch_size` is now per process: the global batch is 64 x the number of processes.
        Save checkpoints from rank 0 only.
    """
    when_not = """
        With one GPU (or on CPU in one process) there is nothing to parallelize: with a single
        device DataParallel just calls the module, and DDP with one process only adds setup.
        Drop the wrapper rather than switching. DDP needs a launcher (`torchrun`), which makes
        it awkward in a notebook; for a throw-away interactive experiment DataParallel is the
        one-line option. When the model does not fit on one GPU, DDP does not help either
        (every process holds a full copy of model, gradients and optimizer state): that needs
        sharding, such as FSDP.
    """
    references = (
        "PyTorch tutorial, Getting Started with Distributed Data Parallel (comparison with DataParallel): https://pytorch.org/tutorials/intermediate/ddp_tutorial.html",
        "PyTorch docs, DistributedDataParallel: https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        "PyTorch docs, CUDA semantics — Use nn.parallel.DistributedDataParallel instead of multiprocessing or nn.DataParallel: https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel",
        "PyTorch docs, torchrun (Elastic Launch): https://pytorch.org/docs/stable/elastic/run.html",
        "Li et al., PyTorch Distributed: Experiences on Accelerating Data Parallel Training, VLDB 2020: https://arxiv.org/abs/2006.15704",
        "Seed 002 (Use DistributedDataParallel not DataParallel), seed 003 (DataParallel no, DistributedDataParallel yes)",
    )
    engine = "After pitstop.engine.init_distributed() in a script launched by torchrun, make_step wraps the model in DistributedDataParallel (gloo on CPU, nccl on CUDA) and only rank 0 writes checkpoints."


# --- lint face ---
from pitstop.lint.rule import LintRule

_DP = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel"})
#: the functional form: one replicate/scatter/gather per call, same single process
_DP_FN = frozenset({"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"})


class DataParallelRule(LintRule, tip="PIT701"):
    runs = "step"  # paid every step wherever the reported line is
    message = "nn.DataParallel is single-process and slower than DistributedDataParallel even on one machine; use DDP with torchrun"
    in_tests = False

    def visit_Call(self, node):
        q = self.ctx.call_name(node)
        if q in _DP:
            self.report(node)
        elif q in _DP_FN:
            self.report(node, "nn.parallel.data_parallel(...) replicates the module to every GPU on every call in one "
                              "process; use DistributedDataParallel with torchrun")


# --- doctor face ---
from pitstop.doctor.analysis.check import Check  # noqa: E402


class DataParallelCheck(Check, tip="PIT701"):
    looks_at = "models wrapped in nn.DataParallel"

    def check(self, obs, th):
        for m in obs.models:
            if m.dataparallel:
                yield self.finding(
                    th, title="nn.DataParallel drives the GPUs from one process",
                    evidence=f"the trained model is {m.cls} (nn.DataParallel): one Python process scatters "
                             "inputs and gathers outputs every step, bound by the GIL.",
                    fix="DistributedDataParallel, one process per GPU, launched with torchrun", severity="medium")


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class DataParallelTrace(TraceCheck, tip="PIT701"):
    looks_at = "GPU activity on several devices in one process's trace (nn.DataParallel)"

    def check(self, rank, th):
        if rank.gpu is None or rank.gpu.devices < 2:
            return
        yield self.finding(
            th, rank, title="one process drives several GPUs (nn.DataParallel?)", impact=None, severity="medium",
            evidence=(f"this trace holds GPU work on {rank.gpu.devices} devices from one process; DataParallel "
                      "replicates the model every step from one Python thread"),
            fix="use DistributedDataParallel, one process per GPU, launched by torchrun")
