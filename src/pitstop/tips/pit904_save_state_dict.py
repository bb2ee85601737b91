"""PIT904 save-state-dict: save state_dicts, everything a resume needs, and write atomically."""

from __future__ import annotations

from pitstop.catalog import Tip


class SaveStateDict(Tip):
    code = "PIT904"
    slug = "save-state-dict"
    title = "torch.save(model) pickles the class; save state_dict() and a complete, atomic checkpoint"
    faces = "LE"
    seeds = ("001", "002")
    truth = (
        "Seed 002's `torch.save(model.state_dict(), PATH)` is right. `torch.save(model)` instead "
        "pickles the module object, which refers to its class by import path: loading needs the "
        "same code at the same location, and with the `weights_only=True` default of PyTorch "
        "2.6+ it fails (checked here on torch 2.13: `UnpicklingError`). Seed 001's checkpoint "
        "holds model and optimizer only: resuming also needs the GradScaler, the LR scheduler, "
        "the step counter and the RNG states, and the file should be written atomically (write "
        "a temporary file, fsync, rename) so a crash mid-write cannot destroy the last good "
        "checkpoint."
    )

    what = """
        Flags `torch.save(m, …)` where `m` is a name bound in the file to an `nn.Module`
        instance (an `nn.*` constructor or a class subclassing `nn.Module`, optionally chained
        with `.to(…)`, `.cuda()` or `.cpu()`). It reports at the call and offers no fix: the
        loading side has to change too.
    """
    why = """
        A pickled module breaks when the class is renamed, moved or changed, and it can only be
        loaded with `weights_only=False`, which runs code from the file (PIT903). A
        `state_dict` is a plain mapping of names to tensors that loads into any compatible
        module.

        A checkpoint is also often incomplete: without the optimizer state Adam restarts its
        moment estimates from zero; without the scheduler the learning rate jumps back to its
        start; without the GradScaler fp16 training restarts from the initial loss scale;
        without the step and RNG states the data order and dropout masks differ from an
        uninterrupted run. And `torch.save(obj, path)` truncates the previous checkpoint before
        writing (checked here: a 4 MB file was 0 bytes as soon as the writer opened it), so a
        crash or preemption mid-write leaves a broken file and no good one.
    """
    example = """
        ```python
        torch.save(model, "model.pt")             # pickles the class

        torch.save({"model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, "ckpt.pt")
        # resumes with a fresh scheduler, scaler and RNG; a crash mid-write leaves a broken file
        ```
    """
    use_instead = """
        ```python
        def save_checkpoint(path, step):
            np_state = np.random.get_state()
            state = {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "step": step,
                "rng": {
                    "python": random.getstate(), "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all(),
                    "numpy": (np_state[0], torch.from_numpy(np_state[1]), *np_state[2:]),
                },
            }
            tmp = f"{path}.tmp"                  # same directory, so same filesystem
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())             # on disk before it replaces the old file
            os.replace(tmp, path)                # atomic: the old checkpoint or the new one

        state = torch.load(path, map_location="cpu")   # loads with weights_only=True
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])  # ... scheduler, scaler, RNG likewise
        ```
        The NumPy key array is stored as a tensor because a raw ndarray does not load with
        `weights_only=True`. This save/load round trip was checked here: all states restored,
        and the Python, torch and NumPy generators continued with the same numbers.
    """
    when_not = """
        For a final model that will only serve inference, the model `state_dict` alone is
        enough; to ship the program itself rather than weights, use `torch.export` instead of
        pickling the module. `os.replace` is atomic only within one filesystem, so keep the
        temporary file next to the target; to survive a power loss, also fsync the directory
        after the rename. Under DDP, write from rank 0 only. Checkpoints that hold RNG and
        optimizer state are larger (Adam's state is twice the parameter size), which matters
        when you save often.
    """
    references = (
        "PyTorch tutorial, Saving and Loading Models: https://pytorch.org/tutorials/beginner/saving_loading_models.html",
        "PyTorch recipe, Saving and loading a general checkpoint: https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html",
        "PyTorch docs, Serialization semantics: https://pytorch.org/docs/stable/notes/serialization.html",
        "Python docs, os.replace (atomic rename on POSIX): https://docs.python.org/3/library/os.html#os.replace",
        "Seed 001 (3, Loading and save model), seed 002 (Save and load weights)",
    )
    engine = "fit's checkpoints hold the state_dicts of model, optimizer, scheduler and GradScaler plus step, epoch, position in the epoch, every RNG state and the recipe, written atomically (temp file, fsync, rename, fsync of the directory; pitstop.save_checkpoint)."


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes


class SaveStateDictRule(LintRule, tip="PIT904"):
    concern = "correctness"  # never hidden as one-time: a wrong result is wrong however often the code runs
    message = "torch.save of a whole nn.Module pickles its class by import path; save model.state_dict() instead"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.modules = {}  # name -> bound to an nn.Module instance (last binding in file order)

    def visit_Assign(self, node):
        is_module = self.ctx.is_module_expr(node.value)
        for t in node.targets:
            key = nodes.dotted(t.target)
            if key is not None:
                self.modules[key] = is_module

    def visit_Call(self, node):
        if self.ctx.call_name(node) == "torch.save":
            obj = nodes.arg(node, "obj", 0)
            key = nodes.dotted(obj.value) if obj is not None else None
            if key and self.modules.get(key):
                self.report(node, f"torch.save({key}) pickles the whole module, class by import path; "
                                  f"save {key}.state_dict() instead")
