"""PIT102 pin-memory: have the DataLoader put batches in pinned (page-locked) host memory."""

from __future__ import annotations

from pitstop.catalog import Tip


class PinMemory(Tip):
    code = "PIT102"
    slug = "pin-memory"
    title = "Host batches not pinned when training on a CUDA device"
    faces = "LDKE"
    seeds = ("002", "003")
    truth = (
        "Pinning only matters when batches are copied to a CUDA device: on a machine without "
        "an accelerator `pin_memory=True` is ignored (checked here with torch 2.13 CPU: the "
        "DataLoader warns that no accelerator is found and the batches are not pinned). "
        "Pinned memory makes the host-to-device copy faster, but the copy only overlaps with "
        "the training thread when it is also issued with `non_blocking=True` (PIT103): "
        "pinned + `non_blocking` is what overlaps. Seed 002's \"faster by some small margin\" "
        "is the faster copy alone."
    )

    what = """
        Flags a training `DataLoader(...)` built without `pin_memory=True`, only in files where
        an accelerator is implied (the file calls `.cuda()`, builds `torch.device("cuda...")`,
        uses a string starting with `"cuda"`, touches `torch.cuda.*` or picks its device with
        `torch.accelerator`). Evaluation loaders, one-off `next(iter(...))` loaders and unit
        tests are not flagged (the same scope as PIT101, in-memory and pre-tokenized datasets
        included: their batches are small host tensors built in the loop, where pinning costs
        about the copy it saves), nor loaders whose items are already on the accelerator (a
        Dataset class that moves them there, latents encoded on the GPU up front, or a
        `collate_fn` of the file that calls `.to(device)`/`.cuda()`): pinning a CUDA tensor
        fails. Pinned batches copy faster; they overlap compute only when copied with
        `.to(device, non_blocking=True)` (PIT103), and Accelerate copies with
        `non_blocking=False` unless its `DataLoaderConfiguration` says otherwise.
        Reported at the call; no autofix.
        At run time, when the model is on a CUDA device, the doctor checks whether the training
        DataLoader pins its batches and how long the step spends copying them to the device; `tune` switches pinning on and off and measures your training.
    """
    why = """
        The GPU's DMA engine can only read page-locked host memory. A copy from ordinary
        (pageable) memory is done in two hops: the CUDA driver first copies the data into a
        pinned staging buffer, then transfers it, and the calling thread waits for it. With
        `pin_memory=True` the DataLoader copies each batch into pinned memory (in a background
        thread when `num_workers > 0`), so the host-to-device transfer is a single DMA that
        can run asynchronously when requested with `non_blocking=True`.
    """
    example = """
        ```python
        device = torch.device("cuda")
        loader = DataLoader(dataset, batch_size=64, num_workers=4)   # pageable batches
        for x, y in loader:
            x, y = x.to(device), y.to(device)                        # staged, blocking copy
            ...
        ```
    """
    use_instead = """
        ```python
        loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
        for x, y in loader:
            x = x.to(device, non_blocking=True)   # PIT103: the overlap needs both
            y = y.to(device, non_blocking=True)
            ...
        ```
        Let the loader pin, with workers: calling `tensor.pin_memory()` yourself right before
        the copy is usually no faster than a plain `.to(device)`, because pinning is itself a
        blocking host copy done in the training thread.
    """
    when_not = """
        Without a CUDA device there is nothing to pin for: PyTorch ignores the flag with a
        warning (CPU-only training gains nothing). When the dataset already lives on the GPU
        there are no host-to-device copies. Pinned memory is page-locked, so it cannot be
        swapped out: many workers with large batches and a deep `prefetch_factor` take that
        RAM away from the rest of the system. When the copies are a small share of the step
        (small batches, a large model), the gain is small: the doctor reports the measured
        copy time before recommending it.
    """
    references = (
        "PyTorch docs, CUDA semantics — Use pinned memory buffers: https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",
        "PyTorch docs, torch.utils.data — Memory Pinning: https://pytorch.org/docs/stable/data.html#memory-pinning",
        "PyTorch tutorial, A guide on good usage of non_blocking and pin_memory() in PyTorch: https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        "Seed 002 (Pinned Memory), seed 003 (num_workers > 0 and pin_memory=True)",
    )
    engine = "Recipe.pin_memory pins the loader's host batches (make_loader pins by default when the device is CUDA and never on CPU, where pinning does nothing)."


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes, scope


class PinMemoryRule(LintRule, tip="PIT102"):
    runs = "use"  # paid per batch of the loops that iterate the loader (every step when they train)
    message = ("DataLoader without pin_memory=True while the file trains on CUDA: pinned batches copy faster, and "
               "overlap compute only when copied with .to(device, non_blocking=True) (Accelerate copies with "
               "non_blocking=False unless its DataLoaderConfiguration says otherwise)")
    in_tests = False

    def visit_Call(self, node):
        ctx = self.ctx
        if not ctx.is_dataloader(node):
            return
        a = nodes.arg(node, "pin_memory", 7)
        if a is None and not nodes.has_star_args(node) or a is not None and nodes.is_false(a.value):
            training = scope.loader_scope(ctx, node, in_memory=True)  # None: an evaluation / one-off / in-memory / test loader
            if training is not None and not scope.items_on_device(ctx, node):
                # only in code that trains (issue 42): this file, or a loader it builds for another file of a
                # training project; an evaluation script that iterates its own loader trains nothing
                self.report(node, when=lambda: ctx.cuda_implied and training() and (ctx.trains or (
                    ctx.project is not None and not ctx.used_here(node) and ctx.project.trains(ctx.path))))


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, ms  # noqa: E402
from pitstop.doctor.analysis.records import H2D  # noqa: E402


class PinMemoryCheck(Check, tip="PIT102"):
    #: the HF Trainer builds the DataLoader itself
    framework_fixes = {"transformers": "TrainingArguments(dataloader_pin_memory=True)"}
    requires = "cuda"
    looks_at = "pin_memory of the training DataLoader and host-to-device copy time"

    def check(self, obs, th):
        unpinned = [d for d in obs.train_loaders() if not d.pin_memory]
        h2d = obs.h2d or H2D()
        copies = h2d.copies
        if not unpinned or not copies:
            return
        seconds = h2d.seconds
        share = seconds / obs.mean_step if obs.mean_step else None
        yield self.finding(
            th, title="Batches are copied to the GPU from pageable memory",
            evidence=f"the training DataLoader has pin_memory=False; {copies:.1f} host-to-device copies per "
                     f"step take {ms(seconds)} of host time per step.",
            fix="DataLoader(..., pin_memory=True) and .to(device, non_blocking=True)",
            share=share, seconds=seconds, where=[d.where for d in unpinned if d.where])


# --- knob face ---
from pitstop.tune.knob import Applicability, Knob  # noqa: E402


class PinMemoryKnob(Knob, tip="PIT102"):
    """Pinned host batches and non-blocking copies (CUDA only). Script mode patches
    ``DataLoader.__init__`` in the child: loaders built without ``pin_memory`` get
    ``pin_memory=True``; and ``Tensor.to`` copies a pinned CPU tensor with ``non_blocking=True``
    (PIT103) unless the call says otherwise: pinned + non_blocking is what lets the copy overlap
    the compute, and what the snippet asks for (a copy from pinned memory to the GPU is ordered
    on the stream, so the result is the same)."""

    name = "pin-memory"
    title = "pinned host memory"
    order = 45

    def applies(self, ctx):
        if not ctx.on_cuda:
            return Applicability(False, "CUDA only: pinned memory only speeds up host-to-GPU copies "
                                        f"(training runs on {ctx.device})")
        if ctx.loader_workers is None:
            return Applicability(False, "no torch DataLoader was iterated for training")
        if ctx.pin_memory:
            return Applicability(False, "the training DataLoader already pins memory")
        return Applicability(True)

    def recipe_fields(self, value, ctx):
        return {"pin_memory": True}

    def label(self, value):
        return "pin_memory=True + non_blocking"

    def apply_in_child(self, value, **options):
        import torch
        from torch.utils.data import DataLoader

        from pitstop.tune.patch import patch_init

        def change(args):
            args["pin_memory"] = True

        patch_init(DataLoader, change)
        to = torch.Tensor.to

        def to_non_blocking(self, *args, **kwargs):
            if "non_blocking" not in kwargs and len(args) < 3 and self.device.type == "cpu" and self.is_pinned():
                kwargs["non_blocking"] = True
            return to(self, *args, **kwargs)

        torch.Tensor.to = to_non_blocking

    def snippet(self, value, ctx):
        return """
            train_loader = DataLoader(train_set, batch_size=..., shuffle=True, pin_memory=True)
            ...
            x = x.to("cuda", non_blocking=True)   # pinned + non_blocking: the copy overlaps compute
        """


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


class PageableCopyTrace(TraceCheck, tip="PIT102"):
    looks_at = "host-device memcpys from or to pageable host memory (Memcpy names, src_kind/dst_kind)"

    def check(self, rank, th):
        c = rank.copies
        if c is None or not c.pageable or c.pageable < max(rank.steps, 1) or c.pageable_share < 0.001:
            return
        yield self.finding(
            th, rank, title="host-device copies from pageable memory", impact=c.pageable_share,
            evidence=(f"{c.pageable} of {c.pageable + c.pinned + c.unknown} host-device copies use pageable host memory "
                      f"({c.pageable / max(rank.steps, 1):.1f} per step, {pct(c.pageable_share)} of the step); a "
                      "pageable copy is staged by the driver and blocks the host"),
            fix="pin the host batches (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with "
                ".to(device, non_blocking=True)")
