"""PIT103 non-blocking-copy: copy batches to the GPU with non_blocking=True (from pinned memory)."""

from __future__ import annotations

from pitstop.catalog import Tip


class NonBlockingCopy(Tip):
    code = "PIT103"
    slug = "non-blocking-copy"
    title = "Batches copied to the device with a blocking .to(device) / .cuda()"
    faces = "LDE"
    seeds = ("001", "003")
    truth = (
        "`non_blocking=True` makes a host-to-device copy asynchronous only when the source "
        "is in pinned memory (PIT102); a non_blocking copy from pageable memory is still "
        "synchronous. Seed 003's comment that `model(data)` is a sync point that \"has to "
        "wait for data\" is wrong: the forward kernels are queued on the same CUDA stream "
        "after the copy, the stream runs them in order, and the CPU thread does not wait. "
        "Seed 001's \"when it's applicable\" hides the one unsafe direction: a non_blocking "
        "device-to-host copy must not be read before a synchronization."
    )

    what = """
        Flags, inside a loop over a loader, `.to(...)` or `.cuda()` applied to a batch without
        `non_blocking=True`: the loop's target names (`for x, y in loader:` then
        `x.to(device)`), names bound from `next(it)` in a loop, and comprehension variables over
        them (`[t.to(device) for t in batch]`); only in files where an accelerator is implied
        (`"cuda"`, `torch.cuda.*`, `.cuda()`, `torch.accelerator.*`). Not flagged: dtype-only
        casts (`.to(torch.float16)`, `.to(weight_dtype)`), evaluation copies (an evaluation
        function, `no_grad`/`inference_mode`, an evaluation loader), batches a framework
        already placed (a loader passed to `accelerator.prepare`/`fabric.setup_dataloaders`,
        a LightningModule's hooks), unit tests. Reported at the call; the safe autofix adds
        `non_blocking=True` (safe because later kernels on the same stream are ordered after
        the copy, and from pageable memory the copy simply stays synchronous). At run time the
        doctor measures how long the training thread blocks in each batch's host-to-device
        copies.
    """
    why = """
        CUDA work is asynchronous: the CPU queues kernels and runs ahead while the GPU works.
        A blocking copy returns only when the data has arrived, and the copy itself waits
        behind every kernel already queued on the stream. So the CPU stalls until the GPU has
        drained its queue, and then the GPU idles while the CPU prepares and queues the next
        forward pass. With `non_blocking=True` from pinned memory the copy is queued like a
        kernel and the call returns at once; the CPU keeps queueing work.
    """
    example = """
        ```python
        loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
        for x, y in loader:
            x, y = x.cuda(), y.cuda()        # CPU waits for each copy
            loss = loss_fn(model(x), y)
            ...
        ```
    """
    use_instead = """
        ```python
        loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)      # queued after the copies, same stream
            ...
        ```
        The other direction is not safe by default: `t.to("cpu", non_blocking=True)` returns
        before the data has arrived, so read the host tensor only after
        `torch.cuda.synchronize()` or an event's `synchronize()`.
    """
    when_not = """
        Without pinned memory (PIT102) the copy stays synchronous: the flag changes nothing
        (and does no harm). On CPU-only training there is no copy: `.to("cpu")` returns the
        same tensor. On a single stream the GPU still runs the copy and the kernels one after
        the other; what is gained is that the CPU is not stalled. Overlapping the copy with the
        previous step's compute needs a prefetch on a side stream. If the step reads the batch
        on the host right away (`.item()`, `.tolist()`, PIT201) the wait just moves there.
    """
    references = (
        "PyTorch tutorial, A guide on good usage of non_blocking and pin_memory() in PyTorch: https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        "PyTorch docs, CUDA semantics — Use pinned memory buffers: https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",
        "PyTorch docs, torch.Tensor.to: https://pytorch.org/docs/stable/generated/torch.Tensor.to.html",
        "CUDA Runtime API — API synchronization behavior: https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html",
        "Seed 001 (Asynchronous data transfer), seed 003 (asynchronous CPU-GPU transfer)",
    )
    engine = "Recipe.non_blocking (on by default) copies every batch tensor with non_blocking=True, and on CUDA fit's prefetcher queues the next batch's copy on a side stream while the current step computes."


# --- lint face ---
from pitstop.lint.rule import SAFE, LintRule, cst, nodes, scope

_DTYPES = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int16",
                     "int32", "int64", "long", "int", "short", "uint8", "bool", "complex64", "complex128"})


_DTYPE_NAME = ("dtype", "precision")
_PLACERS = ("prepare", "setup_dataloaders", "prepare_data_loader")  # accelerate / Fabric put batches on the device


class NonBlockingRule(LintRule, tip="PIT103"):
    message = "batch copied to the device without non_blocking=True: the copy cannot overlap compute"
    in_tests = False
    fix = SAFE

    def __init__(self, ctx):
        super().__init__(ctx)
        self.placed = set()  # loader names handed to accelerator.prepare / fabric.setup_dataloaders
        self.next_batches = {}  # function -> names bound from next(<iterator>) inside a loop

    def visit_Assign(self, node):
        value = node.value
        ctx = self.ctx
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "next"
                and ctx.loop() is not None and value.args and self._iterator(value.args[0].value)):
            names = self.next_batches.setdefault(ctx.current_function(), set())
            for t in node.targets:
                names.update(nodes.bound_names(t.target))

    def visit_Call(self, node):
        name = nodes.method(node)
        if name in _PLACERS:
            self.placed.update(n for a in node.args for n in [nodes.root_name(a.value)] if n)
            return
        if name not in ("to", "cuda"):
            return
        ctx = self.ctx
        root = nodes.root_name(nodes.receiver(node))
        if root is None or nodes.has_kwargs_splat(node) or ctx.framework_class() is not None:
            return  # a LightningModule's batch arrives on the device already
        loops = self._batch_loops(root)
        if loops is None or self._evaluation() or loops and all(scope.eval_only(n) for n in loops):
            return  # an evaluation copy: off the training step (and often from an unpinned loader)
        nb = nodes.kwarg(node, "non_blocking")
        if nb is not None and not nodes.is_false(nb.value):
            return
        if name == "to" and not self._is_device_copy(node):
            return
        fix = ctx.fix(SAFE, "Add non_blocking=True", (node, nodes.with_kwarg(node, "non_blocking", "True")))
        # only in a file that trains (issue 42): the copies of an evaluation script overlap nothing it waits on
        self.report(node, fix=fix, when=lambda: ctx.cuda_implied and ctx.trains and not (loops & self.placed))

    def _evaluation(self):
        ctx = self.ctx
        fn = ctx.current_function()
        return ctx.is_eval_function(fn) or any(ctx.grad_mode(c) for c in ctx.with_calls()) or (
            fn is not None and any(ctx.grad_mode(d.decorator) for d in fn.decorators))

    def _iterator(self, expr):
        """``it`` / ``train_iter`` / ``loader_iter``, or a name bound to ``iter(...)``."""
        name = (nodes.last_name(expr) or "").lower()
        if name == "it" or any(k in name for k in ("loader", "iter", "batches")):
            return True
        value = self.ctx.value_of(expr)
        return isinstance(value, cst.Call) and nodes.last_name(value.func) == "iter"

    def _batch_loops(self, root):
        """The names of the loaders whose batch ``root`` is (a loop target, a name bound from
        ``next(it)`` in a loop, or a comprehension variable over one); None when it is none."""
        ctx = self.ctx
        if ctx.loop() is not None and root in self.next_batches.get(ctx.current_function(), ()):
            return set()
        comp = _comprehension_source(ctx.ancestors, root)
        if comp is not None:
            root = comp
        loops = [f for f in ctx.function_frames() if getattr(f, "over_loader", False) and root in f.targets]
        if not loops:
            return None
        return {n for f in loops for n in [nodes.root_name(_unwrap(f.node.iter))] if n}

    def _is_device_copy(self, node):
        pos = nodes.positional(node)
        if len(pos) > 1:
            return False
        if pos:
            first = pos[0].value
            q = self.ctx.qualname(first)
            if q and q.startswith("torch.") and q[6:] in _DTYPES:
                return False
            key = (nodes.last_name(first) or "").lower()
            if any(k in key for k in _DTYPE_NAME):  # .to(weight_dtype): a cast, not a copy
                return False
            s = nodes.string_value(first)
            return s is None or not s.startswith("cpu")
        device = nodes.kwarg(node, "device")
        if device is None:
            return False
        s = nodes.string_value(device.value)
        return s is None or not s.startswith("cpu")




def _unwrap(it):
    """``enumerate(loader)`` / ``tqdm(loader)`` -> ``loader``."""
    while isinstance(it, cst.Call) and it.args and isinstance(it.func, (cst.Name, cst.Attribute)) \
            and nodes.last_name(it.func) in ("enumerate", "tqdm", "iter", "zip", "islice", "track"):
        it = it.args[0].value
    return it


def _comprehension_source(ancestors, root):
    """``batch`` for ``t`` in ``[t.to(dev) for t in batch]``; None when ``root`` is no comprehension variable."""
    for node in reversed(ancestors):
        if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
            clause = node.for_in
            while clause is not None:
                if root in nodes.bound_names(clause.target):
                    return nodes.root_name(clause.iter)
                clause = clause.inner_for_in
    return None


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, ms  # noqa: E402
from pitstop.doctor.analysis.records import H2D  # noqa: E402


class NonBlockingCheck(Check, tip="PIT103"):
    requires = "cuda"
    looks_at = "host-to-device copies made without non_blocking=True"

    def check(self, obs, th):
        h2d = obs.h2d or H2D()
        blocking = h2d.blocking
        if blocking <= 0:
            return
        seconds = h2d.seconds
        share = seconds / obs.mean_step if obs.mean_step else None
        yield self.finding(
            th, title="Host-to-device copies block the training thread",
            evidence=f"{blocking:.1f} copies per step use .to(device) without non_blocking=True "
                     f"({ms(seconds)} per step spent in copies).",
            fix="pin the batches (PIT102) and copy with .to(device, non_blocking=True)",
            share=share, seconds=seconds)


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy")


class BlockingCopyTrace(TraceCheck, tip="PIT103"):
    looks_at = "host-device copies that no kernel overlaps, and syncs caused by copy operators"

    def check(self, rank, th):
        c = rank.copies
        sites = [s for s in rank.syncs.sites if s.cause.startswith(_COPY_OPS)]
        copy_syncs = sum(s.count for s in sites)
        if c is None or not (c.htod or c.dtoh):
            return
        exposed = c.copy_share * (1 - (c.copy_overlap or 0.0))
        per_step = copy_syncs / max(rank.steps, 1)
        if exposed < th.copy_share and per_step < 1:
            return
        where = f"; {copy_syncs} syncs by copies ({per_step:.1f} per step), e.g. {sites[0].call} <- {sites[0].cause}" \
            if sites else ""
        yield self.finding(
            th, rank, title="host-device copies block the step instead of overlapping it", impact=exposed,
            evidence=(f"copies take {pct(c.copy_share)} of the step and kernels overlap {pct(c.copy_overlap)} of "
                      f"their time{where}"),
            fix="copy pinned batches with .to(device, non_blocking=True) so the copy overlaps compute; read results "
                "back to the host once every N steps")
