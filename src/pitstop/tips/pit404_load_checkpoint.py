"""PIT404 load-checkpoint: load with map_location, and let go of the checkpoint once restored."""

from __future__ import annotations

from pitstop.catalog import Tip


class LoadCheckpoint(Tip):
    code = "PIT404"
    slug = "load-checkpoint"
    title = "torch.load without map_location, and the checkpoint dict kept alive after loading"
    faces = "LE"
    seeds = ("001", "002")
    truth = (
        "Seed 001 is right on both points. Without `map_location`, tensors go back to the device "
        "they were saved from (torch.load docs): a GPU-saved checkpoint lands on that GPU next to "
        "the model, and fails to load where that device does not exist. Measured here: a 96 MiB "
        "checkpoint still referenced after `load_state_dict` kept the process at 414 MiB RSS, "
        "318 MiB after `del checkpoint`. Seed 002's `model.load_state_dict(torch.load(PATH))` "
        "frees it at once but has no `map_location`. `weights_only` has defaulted to True since "
        "PyTorch 2.6 (PIT903)."
    )

    what = """
        Flags `torch.load(…)` called without `map_location`, except in unit tests (they load
        what they just wrote, on the same device). The finding is
        reported at the call; there is no autofix, since the right target (`"cpu"`, `device`, a per-rank
        mapping) depends on the program.
    """
    why = """
        `torch.load` first deserializes every storage on the CPU and then moves it to the
        device recorded at save time. For a checkpoint written from `cuda:0` that means a
        second full copy of the weights (and optimizer state) on GPU 0 while the model's own
        copy is already there, on every process that loads it: in a multi-GPU job all ranks
        load onto GPU 0 unless the location is remapped. On a machine without that device the
        load raises an error. And after `load_state_dict` has copied the values into the model
        and optimizer, a `checkpoint` variable that is still referenced keeps that extra copy
        alive until it goes out of scope.
    """
    example = """
        ```python
        checkpoint = torch.load(save_path)           # back onto the saving device
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        train(model, optimizer)                      # checkpoint still alive
        ```
    """
    use_instead = """
        ```python
        checkpoint = torch.load(save_path, map_location="cpu", weights_only=True)
        model.load_state_dict(checkpoint["model"])          # copies onto the model's device
        optimizer.load_state_dict(checkpoint["optimizer"])  # state follows the params
        del checkpoint
        ```
        `map_location=device` (or `{"cuda:0": f"cuda:{rank}"}` under DDP) loads straight onto
        the target device. For very large files, `mmap=True` maps the file instead of reading
        every storage into memory first.
    """
    when_not = """
        A CPU-only program reading CPU-saved files gains nothing from `map_location`; the
        rule still asks for it so that the script survives a GPU-saved file. `del` saves
        nothing when the checkpoint is not bound to a name (seed 002's one-liner) or is loaded
        inside a function that returns right after restoring. Files the same script wrote from
        CPU tensors (every `torch.save` of the file saves `x.cpu()`) load onto the CPU anyway: no
        finding there; nor for a file whose contents only go to an LR scheduler's
        `load_state_dict` (its state holds step counts and learning rates, no tensors). Loading
        happens once per run:
        this is about peak memory and portability, not about step time.
    """
    references = (
        "PyTorch docs, torch.load (map_location, mmap, weights_only): https://pytorch.org/docs/stable/generated/torch.load.html",
        "PyTorch tutorial, Saving and Loading Models — across devices: https://pytorch.org/tutorials/beginner/saving_loading_models.html",
        "PyTorch tutorial, Getting Started with Distributed Data Parallel — save and load checkpoints: https://pytorch.org/tutorials/intermediate/ddp_tutorial.html",
        "Seed 001 (Loading to a different device; free the checkpoint variable), seed 002 (Save and load weights)",
    )
    engine = "fit loads the newest good checkpoint with map_location set to the training device and drops the loaded dict once the model, optimizer, scheduler and scaler hold their copies (pitstop.load_checkpoint)."


# --- lint face ---
from pitstop.lint.rule import LintRule, cst, nodes


class MapLocationRule(LintRule, tip="PIT404"):
    message = "torch.load without map_location loads every tensor onto the device it was saved from"
    in_tests = False  # a unit test loads the file it just wrote, on the same device

    def __init__(self, ctx):
        super().__init__(ctx)
        self.saves = []  # for each torch.save of the file: does it save a `.cpu()` value?

    def visit_Call(self, node):
        name = self.ctx.call_name(node)
        if name == "torch.save":
            first = nodes.positional(node)[:1]
            self.saves.append(bool(first) and nodes.method(first[0].value) == "cpu")
        elif (name == "torch.load" and nodes.arg(node, "map_location", 1) is None
                and not nodes.has_kwargs_splat(node)):
            # not when every file this script writes holds CPU tensors (``torch.save(feats.cpu(), path)``)
            if not self._scheduler_state(node):
                self.report(node, when=lambda: not (self.saves and all(self.saves)))

    def _scheduler_state(self, node) -> bool:
        """``state = torch.load(...)`` whose every use in the function is ``<...sched...>.load_state_dict(state)``."""
        from pitstop.lint.walk import children

        parent = self.ctx.parent
        fn = self.ctx.current_function()
        if not (isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name) and fn is not None):
            return False
        name, loads, uses = parent.targets[0].target.value, 0, 0
        stack = [fn.body]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Name) and n.value == name:
                uses += 1
            elif (isinstance(n, cst.Call) and nodes.method(n) == "load_state_dict" and len(n.args) == 1
                    and isinstance(n.args[0].value, cst.Name) and n.args[0].value.value == name
                    and "sched" in (nodes.last_name(n.func.value) or "").lower()):
                loads += 1
                continue
            stack.extend(children(n))
        return loads > 0 and uses == 1  # the one other use: the assignment's own target
