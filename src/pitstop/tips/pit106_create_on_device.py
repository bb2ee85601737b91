"""PIT106 create-on-device: build new tensors with device=, not on the host then copied."""

from __future__ import annotations

from pitstop.catalog import Tip


class CreateOnDevice(Tip):
    code = "PIT106"
    slug = "create-on-device"
    title = "Tensor created on the host and then moved: pass device= to the factory"
    faces = "LB"
    seeds = ("002",)
    truth = (
        "Creating the tensor on the device saves a host allocation, the host-side fill and a "
        "host-to-device copy. Seed 002's snippet spells it `tensor.rand(2, 2).cuda()`; the "
        "function is `torch.rand`. Random factories draw from the generator of the device "
        "they run on, so `torch.rand(n, device=\"cuda\")` gives different numbers than "
        "`torch.rand(n).cuda()` under the same seed."
    )

    what = """
        Flags a tensor factory (`torch.rand`, `randn`, `randint`, `zeros`, `ones`, `empty`,
        `full`, `arange`, `eye`, `linspace`) immediately followed by `.cuda()`,
        `.to("cuda…")`, `.to(device=…)` or `.to(<name containing "device">)`. Reported at the
        chained call; the autofix moves the device into the factory's `device=` argument (safe,
        except for `rand`/`randn`/`randint`, where it is unsafe: the numbers then come from the
        device's random generator, not the CPU's). `torch.tensor(data).cuda()` is not flagged:
        with `device=` the data still crosses from the host, so there is no copy to save.
        `pitstop bench PIT106` compares both forms.
    """
    why = """
        `torch.zeros(n).cuda()` allocates and fills the tensor in host memory, allocates it
        again on the GPU, copies it over from pageable memory (a copy the CPU waits for, see
        PIT103) and then frees the host tensor. With `device=` the factory runs directly on
        the GPU: one allocation, no transfer, no stall of the CPU thread. Inside a training
        step this is paid on every step.
    """
    example = """
        ```python
        for x, y in loader:
            noise = torch.randn(x.shape[0], 128).cuda()      # host alloc + fill + copy
            mask = torch.ones(seq_len, seq_len).to(device)
            ...
        ```
    """
    use_instead = """
        ```python
        for x, y in loader:
            noise = torch.randn(x.shape[0], 128, device="cuda")
            mask = torch.ones(seq_len, seq_len, device=device)
            ...
        ```
        For a tensor shaped like an existing one, `torch.zeros_like(x)`, `torch.randn_like(x)`
        and `x.new_zeros(...)` take its device and dtype. Constant masks and buffers can be
        built once, outside the loop (or registered with `register_buffer` so that
        `model.to(device)` moves them).
    """
    when_not = """
        On a CPU-only run there is nothing to save: `.to("cpu")` returns the same tensor.
        A tensor created once at setup pays the copy once. `torch.tensor(python_list,
        device=...)` still has to bring the Python data over from the host: it saves the
        intermediate host tensor, not the transfer. For random factories the values change
        (another generator), which only matters if you must reproduce earlier runs bit for
        bit.
    """
    references = (
        "PyTorch Performance Tuning Guide — Create tensors directly on the target device: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "PyTorch docs, CUDA semantics — Best practices, device-agnostic code: https://pytorch.org/docs/stable/notes/cuda.html#best-practices",
        "PyTorch docs, torch.zeros (the `device` argument of tensor factories): https://pytorch.org/docs/stable/generated/torch.zeros.html",
        "Seed 002 (Construct tensors directly on GPUs)",
    )


# --- lint face ---
from pitstop.lint.rule import SAFE, UNSAFE, LintRule, nodes

#: factories that make their values (``torch.tensor(data)`` is left out: it copies host data to the
#: device with ``device=`` too, so there is no host tensor to save)
_FACTORIES = frozenset({"rand", "randn", "randint", "zeros", "ones", "empty", "full", "arange", "eye",
                        "linspace"})
_RANDOM = frozenset({"rand", "randn", "randint"})


class CreateOnDeviceRule(LintRule, tip="PIT106"):
    message = "tensor made on the CPU and then copied to the device; pass device= to the factory"
    in_tests = False
    fix = SAFE

    def visit_Call(self, node):
        name = nodes.method(node)
        if name not in ("cuda", "to"):
            return
        ctx = self.ctx
        inner = nodes.receiver(node)
        q = ctx.call_name(inner)
        if not q or not q.startswith("torch.") or q[6:] not in _FACTORIES:
            return
        device = None
        if name == "cuda":
            if nodes.positional(node) or nodes.has_star_args(node):
                device = None
            else:
                device = '"cuda"'
        else:
            kw = nodes.kwarg(node, "device")
            pos = nodes.positional(node)
            if kw is not None:
                target = kw.value
            elif pos and (
                    (nodes.string_value(pos[0].value) or "").startswith("cuda")
                    or "device" in (nodes.last_name(pos[0].value) or "").lower()):
                target = pos[0].value
            else:
                return
            device = ctx.source_of(nodes.strip_parens(target)) if len(node.args) == 1 else None
        fix = None
        if device and nodes.kwarg(inner, "device") is None and not nodes.has_kwargs_splat(inner):
            fn = q[6:]
            # the random factories draw from the device's generator instead: other numbers
            applicability = UNSAFE if fn in _RANDOM else SAFE
            fix = ctx.fix(applicability, f"Create it on the device: device={device}",
                          (node, nodes.with_kwarg(inner, "device", device)))
        self.report(node, fix=fix)


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Outcome  # noqa: E402


class CreateOnDeviceBench(Benchmark, tip="PIT106"):
    title = "New tensor on the GPU: torch.rand(n).cuda() vs torch.rand(n, device='cuda')"
    gpu_only = True
    gpu_why = ("On a CPU run `.to('cpu')` returns the same tensor: there is no host allocation or copy to save, "
               "so nothing to compare.")
    claim = Claim(
        seed="002",
        text='t = tensor.rand(2, 2).cuda()  # bad; t = tensor.rand(2, 2, device="cuda")  # good',
        baseline="torch.rand(n).cuda()",
        candidate="torch.rand(n, device='cuda')",
        ratio_of="median time create-then-move / create on the device",
        scope="gpu",  # the seed's two lines are about `.cuda()` vs device="cuda"
    )

    def run(self, ctx):
        import torch

        from pitstop.gpu import cuda_device

        n = ctx.size(tiny=1 << 16, quick=1 << 20, full=1 << 24)
        variants = {
            "torch.rand(n).cuda()": lambda: torch.rand(n).cuda(),
            "torch.rand(n, device='cuda')": lambda: torch.rand(n, device="cuda"),
            "torch.zeros(n).to('cuda')": lambda: torch.zeros(n).to("cuda"),
            "torch.zeros(n, device='cuda')": lambda: torch.zeros(n, device="cuda"),
        }
        measured = ctx.time(variants)
        return Outcome(
            workload=f"{n:,} float32 values ({4 * n / 2**20:.0f} MiB) created per call on "
                     f"{cuda_device().name}; the Timer synchronizes the GPU around each block",
            measurements=measured,
            comparisons=[Comparison("torch.zeros(n).to('cuda')", "torch.zeros(n, device='cuda')",
                                    "torch.zeros then .to('cuda') vs device='cuda'")],
        )
