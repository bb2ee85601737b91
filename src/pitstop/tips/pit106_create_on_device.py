"""PIT106 create-on-device: build new tensors with device=, not on the host then copied."""

from __future__ import annotations

from pitstop.tips._base import Tip


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
        `full`, `arange`, `eye`, `linspace`, `tensor`) immediately followed by `.cuda()`,
        `.to("cuda…")`, `.to(device=…)` or `.to(<name containing "device">)`. Reported at the
        chained call; the safe autofix moves the device into the factory's `device=` argument.
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
    )

    def run(self, ctx):
        import torch

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
                     f"{torch.cuda.get_device_name()}; the Timer synchronizes the GPU around each block",
            measurements=measured,
            comparisons=[Comparison("torch.zeros(n).to('cuda')", "torch.zeros(n, device='cuda')",
                                    "torch.zeros then .to('cuda') vs device='cuda'")],
        )
