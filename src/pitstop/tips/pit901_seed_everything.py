"""PIT901 seed-everything: seed every RNG in one call; deterministic algorithms on request."""

from __future__ import annotations

from pitstop.catalog import Tip


class SeedEverything(Tip):
    code = "PIT901"
    slug = "seed-everything"
    title = "Seed Python, NumPy, torch and CUDA in one call, with an optional deterministic mode"
    faces = "EH"
    seeds = ("002",)
    helpers = ("seed_everything",)
    truth = (
        "`torch.use_deterministic_algorithms(True)` is the modern switch: every op with a "
        "deterministic implementation uses it, and ops without one raise an error instead of "
        "varying silently. Seed 002's `torch.backends.cudnn.deterministic = True` covers cuDNN "
        "convolutions only; `cudnn.benchmark = False` is still needed so that the same "
        "convolution algorithm is picked on every run. Also in seed 002's snippet: "
        "`torch.manual_seed` already seeds every CUDA device, so `torch.cuda.manual_seed(1)` is "
        "redundant, and `random.seed(seed)` uses a variable where the other lines use the "
        "literal 1. Older guides also export `CUBLAS_WORKSPACE_CONFIG`; PyTorch removed that "
        "requirement (pytorch/pytorch#161749) and the torch 2.13 documentation of "
        "`use_deterministic_algorithms` no longer mentions it (setting it is harmless)."
    )

    what = """
        `pitstop.seed_everything(seed, deterministic=False)` seeds Python's `random`, NumPy's
        global RNG and torch (the CPU generator and every CUDA device) in one call. With
        `deterministic=True` it also calls `torch.use_deterministic_algorithms(True)` and turns
        `cudnn.benchmark` off. There is no lint rule or doctor check for this tip.
    """
    why = """
        Several generators drive a training run: Python's `random`, NumPy's global RNG (used by
        many augmentation libraries), torch's CPU generator and one generator per CUDA device.
        Seeding only some of them leaves the others varying between runs. DataLoader workers
        derive their `random`, torch and NumPy seeds from a base seed drawn from the main
        process's torch RNG (or from the loader's `generator=`), so seeding torch before
        iterating makes the workers reproducible too.

        Seeds are not enough on a GPU: some kernels are nondeterministic (those built on
        atomic adds, such as `index_add_`, `scatter_add_` and many pooling, padding and
        interpolation backward passes), and cuDNN's benchmark may pick a different convolution
        algorithm on each run. `use_deterministic_algorithms(True)` switches to deterministic
        implementations where they exist and raises where they do not; it also puts
        torch.compile's Inductor into a deterministic mode that skips autotuning.
    """
    example = """
        Seed 002's snippet:
        ```python
        np.random.seed(1)
        torch.manual_seed(1)
        torch.cuda.manual_seed(1)                  # redundant: manual_seed covers CUDA
        random.seed(seed)                          # a different seed than the lines above
        torch.backends.cudnn.deterministic = True  # cuDNN convolutions only
        torch.backends.cudnn.benchmark = False
        ```
    """
    use_instead = """
        ```python
        import pitstop

        pitstop.seed_everything(0)                       # random, numpy, torch, all CUDA devices
        pitstop.seed_everything(0, deterministic=True)   # + deterministic algorithms, no benchmark
        ```
        The same by hand, with a seeded generator for the loader's shuffling:
        ```python
        random.seed(0); np.random.seed(0); torch.manual_seed(0)
        torch.use_deterministic_algorithms(True)   # raises on ops with no deterministic kernel
        torch.backends.cudnn.benchmark = False
        loader = DataLoader(dataset, shuffle=True, num_workers=4,
                            generator=torch.Generator().manual_seed(0))
        ```
    """
    when_not = """
        Seeding alone is cheap and always worth it. Determinism is not free: PyTorch's docs
        warn that deterministic operations are often slower, `benchmark=False` gives up cuDNN
        autotuning (PIT602), and some ops raise instead of running (`warn_only=True` turns the
        error into a warning). Use it to debug and to compare runs, not for production
        throughput. Even then, results are reproducible only on the same hardware, software
        and PyTorch release; PyTorch does not guarantee them across releases, platforms, or
        between CPU and GPU.
    """
    references = (
        "PyTorch docs, Reproducibility: https://pytorch.org/docs/stable/notes/randomness.html",
        "PyTorch docs, torch.use_deterministic_algorithms: https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html",
        "PyTorch docs, torch.utils.data — Randomness in multi-process data loading: https://pytorch.org/docs/stable/data.html#randomness-in-multi-process-data-loading",
        "PyTorch pull request #161749, [cuBLAS] update cuBLAS determinism docs, remove workspace requirement checks: https://github.com/pytorch/pytorch/pull/161749",
        "Seed 002 (Freeze seeds for reproducibility)",
    )
    engine = "Recipe.seed makes fit seed Python, NumPy and torch (pitstop.seed_everything) before training; Recipe.deterministic turns on torch.use_deterministic_algorithms and turns cudnn.benchmark off while the step exists."
