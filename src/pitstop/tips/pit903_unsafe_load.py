"""PIT903 unsafe-load: torch.load(weights_only=False) unpickles, and can run, arbitrary code."""

from __future__ import annotations

from pitstop.catalog import Tip


class UnsafeLoad(Tip):
    code = "PIT903"
    slug = "unsafe-load"
    title = "torch.load(..., weights_only=False) runs pickled code from the file"
    faces = "LE"
    seeds = ()
    truth = (
        "Checked in the installed torch 2.13.0+cpu: `torch.load`'s signature declares "
        "`weights_only: bool | None = None`, and an unset value resolves to `True` unless a "
        "`pickle_module` is passed (then `False`). The default changed from `False` to `True` "
        "in PyTorch 2.6. The environment variable `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1` turns an "
        "*unset* value back to `False` (it cannot override an explicit `weights_only=True`), and "
        "`TORCH_FORCE_WEIGHTS_ONLY_LOAD=1` forces `True` even over an explicit `False`. Loading a "
        "file written by `torch.save(model)` with the default raised `UnpicklingError` here."
    )

    what = """
        Flags `torch.load(…, weights_only=False)`, reporting at the keyword, however often the
        code runs (running once does not make unpickling safe). No fix is offered:
        only you know whether the file is trusted and what it must contain. Unit tests
        (`test_*.py`, `Test*.test_*`) are not flagged: they load the file they just wrote; nor is a
        load of a path the same function writes with `torch.save` (a cache of its own objects, such
        as dataset splits, which `weights_only=True` cannot load).
    """
    why = """
        Checkpoints are pickle files. With `weights_only=False` the unpickler imports and calls
        whatever functions the file names, so loading a downloaded or shared checkpoint runs
        code chosen by whoever wrote it. With `weights_only=True` the unpickler is restricted to
        tensors, primitive types, dicts, lists and tuples, plus the types you allow with
        `torch.serialization.add_safe_globals`; anything else raises instead of executing.
        This is about safety, not speed.
    """
    example = """
        ```python
        ckpt = torch.load("downloaded.pt", weights_only=False)   # executes pickled code
        ```
    """
    use_instead = """
        ```python
        ckpt = torch.load(path, map_location="cpu")    # weights_only=True is the default (2.6+)
        ```
        If the checkpoint holds one of your own classes, allow that class instead of turning
        the check off (checked here with a dataclass: it failed with the default and loaded
        once allow-listed):
        ```python
        torch.serialization.add_safe_globals([TrainConfig])
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        ```
        To share weights, save a `state_dict` (PIT904); the safetensors format stores tensors
        only and involves no pickle at all.
    """
    when_not = """
        A file you wrote yourself on a machine you control is as trusted as your code; there
        `weights_only=False` is a convenience rather than a hole, but an allow-list keeps the
        check on. Some objects need it or an allow-list: a whole pickled model
        (`torch.save(model)`, PIT904) and NumPy arrays (checked here: a checkpoint holding
        `np.random.get_state()` did not load with the default; store the array as a tensor).
        `weights_only=True` narrows what a file can do, but the `torch.load` docs still say:
        never load data from an untrusted source.
    """
    references = (
        "PyTorch docs, torch.load (weights_only): https://pytorch.org/docs/stable/generated/torch.load.html",
        "PyTorch docs, Serialization semantics — torch.load with weights_only=True: https://pytorch.org/docs/stable/notes/serialization.html",
        "Python docs, pickle (\"It is possible to construct malicious pickle data which will execute arbitrary code during unpickling\"): https://docs.python.org/3/library/pickle.html",
        "safetensors: https://huggingface.co/docs/safetensors",
        "Beyond the seeds; related: PIT404 (map_location), PIT904 (save a state_dict)",
    )
    engine = "pitstop.load_checkpoint (and fit's resume) loads with weights_only=True only; the engine stores RNG states and the recipe as tensors and plain types so its own checkpoints need nothing else, and a file that would need the full unpickler is refused with CheckpointError."


# --- lint face ---
from pitstop.lint.rule import LintRule, nodes


class UnsafeLoadRule(LintRule, tip="PIT903"):
    concern = "security"  # never hidden as one-time: running once does not make unpickling safe
    message = "torch.load(weights_only=False) unpickles arbitrary objects: a crafted checkpoint runs code; keep weights_only=True"
    in_tests = False  # a unit test loads the file it just wrote, on the same device

    def __init__(self, ctx):
        super().__init__(ctx)
        self.saved = set()  # (function, path source) of each torch.save

    def visit_Call(self, node):
        q = self.ctx.call_name(node)
        pos = nodes.positional(node)
        if q == "torch.save" and len(pos) >= 2:
            self.saved.add((self.ctx.current_function(), self.ctx.source_of(pos[1].value)))
        elif q == "torch.load":
            a = nodes.kwarg(node, "weights_only")
            if a is not None and nodes.is_false(a.value):
                key = (self.ctx.current_function(), self.ctx.source_of(pos[0].value)) if pos else None
                # not a cache of the function's own objects, written by torch.save beside it (issue 42)
                self.report(a, when=lambda: key not in self.saved)
