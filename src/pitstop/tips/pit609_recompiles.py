"""PIT609 recompiles: a compiled model recompiled again and again, or silently eager past the limit."""

from __future__ import annotations

from pitstop.catalog import Tip


class Recompiles(Tip):
    code = "PIT609"
    slug = "recompiles"
    title = "Compiled model recompiled over and over, or fallen back to eager at the recompile limit"
    faces = "DK"
    seeds = ()
    truth = (
        "Beyond the seeds; extends PIT601. Dynamo guards each compiled graph on the shapes, "
        "dtypes and Python values it saw; a call that fails a guard compiles a new graph. A "
        "sequence length that changes every step under `dynamic=False` recompiles every step; "
        "once the recompile limit (`torch._dynamo.config.recompile_limit`, 8 by default) is "
        "reached, dynamo stops compiling that function and it runs eagerly for the rest of the "
        "process, with only a warning. Compile time then buys nothing."
    )

    what = """
        Records each recompilation of a compiled function or module while the training runs:
        the guard that failed (e.g. "tensor 'x' size mismatch at index 1"), the function, how
        often, and whether the recompile limit was hit, after which the function runs eagerly.
        Compile time spent in the observed steps is counted against the step time it saved.
    """
    why = """
        Every recompilation runs dynamo and Inductor again: seconds to minutes on the critical
        path of training, repeated for each new shape or Python value. When the limit is hit the
        model silently returns to eager mode, so the run pays the compile time and gets none of
        the fusion.
    """
    example = """
        ```python
        model = torch.compile(model, dynamic=False)
        for ids in batches:                # each batch padded to its own longest sequence
            loss = model(ids).mean()       # new length at dim 1: recompile, every step
            loss.backward()
        ```
    """
    use_instead = """
        Pad to a few length buckets (or one fixed length), or tell dynamo which dimension varies:
        ```python
        model = torch.compile(model)            # dynamic=None: a size that changes becomes symbolic
        torch._dynamo.mark_dynamic(ids, 1)      # or mark the varying dimension explicitly
        loader = DataLoader(ds, batch_size=32, drop_last=True)   # no short last batch
        ```
        Keep Python scalars that change every step (a step counter, a learning rate) out of
        the compiled function's arguments, or pass them as tensors.
    """
    when_not = """
        A handful of recompiles at the start (one per distinct shape, e.g. training vs
        evaluation batch size) is normal and costs only their compile time. Dynamic shapes have
        a cost of their own: kernels compiled for symbolic sizes can be slower than
        specialised ones, so a few fixed buckets often beat `dynamic=True`.
    """
    references = (
        "PyTorch docs, torch.compile troubleshooting (recompilation, guards): https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
        "PyTorch docs, dynamic shapes: https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html",
        "PyTorch docs, torch.compiler.set_stance / recompile limit: https://pytorch.org/docs/stable/torch.compiler_api.html",
    )
