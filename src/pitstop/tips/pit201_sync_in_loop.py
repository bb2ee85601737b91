"""PIT201 sync-in-loop: reading device tensors on the host every step stalls the GPU queue."""

from __future__ import annotations

from pitstop.catalog import Tip


class SyncInLoop(Tip):
    code = "PIT201"
    slug = "sync-in-loop"
    title = "Device tensor read on the host (.item(), .cpu(), ...) in every training step"
    faces = "LDE"
    seeds = ("000", "002")
    truth = (
        "The cost is the synchronization, not the bytes moved: reading a CUDA tensor on the "
        "host makes the CPU wait until every queued kernel has finished (seed 002 blames the "
        "transfer). Seed 000's \"`.sum()` is not calling the GPU\" is wrong: `.sum()` launches "
        "a GPU kernel; it just does not make the CPU wait. Accumulate on the device "
        "(`correct += (pred == y).sum()`) and read every N steps; the engine logs that way. "
        "Seed 002's gradient-accumulation snippet calls `loss.item()` every micro-step."
    )

    what = """
        Flags `.item()`, `.cpu()`, `.numpy()` and `.tolist()` inside a training loop (a
        `for`/`while` whose body calls `.backward(...)` or an optimizer's `.step()`), unless
        they sit under an interval guard: an `if` whose test contains `%`, such as
        `if step % 100 == 0:`; not in a CPU-only script (no `"cuda"`, `torch.cuda`/
        `torch.accelerator`, device, local rank, GPU or accelerator framework anywhere in the
        file), where the read waits for nothing, and not for what is shipped over RPC
        (`rpc.rpc_sync(..., args=(m.cpu(), ...))`: the CPU copy is what is sent), nor for
        `module.cpu()` as a statement (an offload: it moves a module and reads no value). A call,
        in the training loop, of a function of the linted files whose own body makes such a
        read (`get_sigmas(t)` doing `.nonzero().item()`; a plain function, a `self.` method, or
        one imported from a linted sibling) is flagged at the call. Reported at the call; no autofix. While training runs, the
        doctor counts the host-device synchronizations per step (including `float(t)`,
        `print(t)` and Python branches on device values) and the time the CPU waits in them.
    """
    why = """
        CUDA kernels run asynchronously: the CPU queues work and runs ahead of the GPU, which
        keeps the GPU busy while Python prepares the next kernels. A host read needs the value
        now, so the CPU blocks until the GPU has finished everything queued before it; then
        the GPU sits idle while the CPU runs Python and queues the next step. One read per
        step throws that overlap away on every step.
    """
    example = """
        ```python
        for step, (x, y) in enumerate(loader):
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            running_loss += loss.item()                    # waits for the GPU
            correct += (out.argmax(1) == y).sum().item()   # and again
        ```
    """
    use_instead = """
        ```python
        running_loss = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        for step, (x, y) in enumerate(loader):
            ...
            running_loss += loss.detach()                  # stays on the device (PIT202)
            correct += (out.argmax(1) == y).sum()          # a kernel, no wait
            if step % 100 == 0:                            # one sync per 100 steps
                print(f"loss {running_loss.item() / (step + 1):.4f}")
        ```
        While debugging, `torch.cuda.set_sync_debug_mode("warn")` warns at every
        synchronizing call.
    """
    when_not = """
        On CPU tensors these calls synchronize nothing (CPU ops run eagerly): in CPU-only
        training the finding is harmless. The lint cannot see a tensor's device, so host
        tensors converted inside the loop are flagged too. A read the step really needs (a
        data-dependent branch, stopping on NaN) must sync; do it every N steps if you can.
        In a long step (a large model) one sync at its end loses little overlap: the doctor
        reports the measured wait before recommending a change.
    """
    references = (
        "PyTorch Performance Tuning Guide — Avoid unnecessary CPU-GPU synchronization: https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
        "PyTorch docs, CUDA semantics — Asynchronous execution: https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution",
        "PyTorch docs, torch.cuda.set_sync_debug_mode: https://pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html",
        "Seed 000 (.item(), .numpy(), .cpu() cause synchronization), seed 002 (Avoid CPU to GPU transfers or vice-versa)",
    )
    engine = "fit keeps each step's loss detached on the device and reads the losses of a whole log interval with one host transfer (log_every steps), where it also checks for inf/NaN; make_step itself never reads a device value."


# --- lint face ---
from pitstop.lint.rule import LintRule, cst, nodes

_SYNCS = frozenset({"item", "cpu", "numpy", "tolist"})
_EXITS = frozenset({"exit", "quit", "_exit", "abort"})
#: methods a framework calls once per training step (as ``pitstop.lint.position.STEP_METHODS``; not imported
#: here: loading the catalog must not load libcst)
_STEP_METHODS = frozenset({"training_step", "compute_loss", "forward"})


class SyncInLoopRule(LintRule, tip="PIT201"):
    message = "host read in the training loop makes the CPU wait for the device every step; accumulate on the device and read every N steps"
    in_tests = False

    def visit_Call(self, node):
        name = nodes.method(node)
        ctx = self.ctx
        if name not in _SYNCS:
            self._helper(node)
            return
        if nodes.method(nodes.receiver(node)) in _SYNCS:
            return  # x.cpu().numpy() is one sync: reported once, at .cpu()
        if name == "cpu" and not node.args and isinstance(ctx.parent, cst.Expr):
            return  # ``vae.cpu()`` as a statement: moves a module (offload), reads no value
        if any(isinstance(a, cst.Call) and (ctx.call_name(a) or "").startswith("torch.distributed.rpc.")
               for a in ctx.ancestors[:-1]):
            return  # shipped over RPC (rpc_sync/rpc_async/remote): the CPU copy is what is sent
        if self._in_exit_branch():
            return  # ``if not isfinite(loss.item()): print(loss.item()); sys.exit(1)``: runs once, on the way out
        site, fn = ctx.site(), ctx.current_function()
        # only where an accelerator is implied: on a CPU-only script the read waits for nothing
        self.report(node, f".{name}() in the training loop makes the CPU wait for the device every step; "
                          "accumulate on the device and read every N steps",
                    when=lambda: ctx.device_implied and ctx.runs_every_step(site, fn))

    def _in_exit_branch(self):
        """The node is in the body of an ``if`` that ends the loop or the program (its last statement is
        ``raise``, ``return``, ``break``, ``sys.exit(...)``/``exit(...)``/``quit(...)``/``os._exit(...)``)."""
        anc = self.ctx.ancestors
        for parent, child in zip(anc, anc[1:]):
            if isinstance(parent, cst.If) and child is parent.body and parent.body.body:
                last = parent.body.body[-1]
                small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else None
                if isinstance(small, (cst.Raise, cst.Return, cst.Break)) or isinstance(small, cst.Expr) and \
                        isinstance(small.value, cst.Call) and nodes.last_name(small.value.func) in _EXITS:
                    return True
        return False

    def _helper(self, node):
        """A call, in a training step, of a function of the linted files that reads a device value on
        the host, in its own body or through the helpers it calls (``get_sigmas(t)`` doing
        ``.nonzero().item()``, ``log_loss_dict`` -> ``.item()``): the read runs every step. The
        message names the chain of calls."""
        ctx = self.ctx
        fn = ctx.current_function()
        if ctx.loop() is None and fn is None:
            return
        found = ctx.sync_chain(node)
        if found is None or found[2] == "synchronize":
            return  # torch.cuda.synchronize() down the chain: PIT203
        chain, line, read, local = found
        site = ctx.site()
        caller = fn.name.value if fn is not None else "training loop"
        self.report(node, f"{' -> '.join([caller, *chain])}: runs every training step and reads a device value "
                          f"on the host (.{read}() at line {line}{'' if local else ' of its file'}): the CPU waits "
                          "for the device; keep the value on the device or read it every N steps",
                    when=lambda: ctx.device_implied and ctx.runs_every_step(site, fn), pattern="chain")


# --- doctor face ---
from pitstop.doctor.analysis.check import Check, pct  # noqa: E402


class SyncInLoopCheck(Check, tip="PIT201"):
    looks_at = "host-device syncs (.item(), .cpu(), .numpy(), .tolist(), float/int/bool of a tensor) per step"
    #: on a GPU the host's time in a sync is the GPU working; the cost is the GPU idle after it
    gpu_role = "trace"
    #: syncs the framework makes for the user: Lightning's progress bar reads every metric
    #: logged with prog_bar=True on the host each step; the HF Trainer's NaN/inf filter of
    #: the logged loss reads it each step (torch.isnan/isinf in a Python ``if``)
    framework_fixes = {"lightning": "for a metric logged per step with self.log(..., prog_bar=True): prog_bar=False "
                                    "(the progress bar reads it on the host every step), or on_step=False, "
                                    "on_epoch=True",
                       "transformers": "TrainingArguments(logging_nan_inf_filter=False) removes the Trainer's "
                                       "per-step NaN/inf test of the loss (a host read); syncs inside the model's "
                                       "forward stay"}

    def check(self, obs, th):
        n = max(obs.steps_observed, 1)
        sites = [s for s in obs.syncs if s.kind != "cuda.synchronize"
                 and s.steps_with_calls / n >= th.per_step_fraction]
        if not sites:
            return
        calls = sum(s.calls for s in sites) / n
        seconds = sum(s.seconds for s in sites) / n
        share = seconds / obs.mean_step if obs.mean_step else None
        listing = ", ".join(f"{s.kind}() at {s.where}" for s in sites[:4])
        if obs.on_cuda:
            cost = f"the host waited {pct(share)} of the step in them"
            severity = None
        else:
            cost = ("on this CPU run they cost little (no device to wait for); on a GPU each one stalls "
                    "the host until the queued kernels finish")
            severity = "low"
        yield self.finding(
            th, title="Host-device sync every step",
            evidence=f"{calls:.1f} syncs per step from {listing}; {cost}.",
            fix="accumulate on the device (total += loss.detach()) and read it every N steps",
            share=share, seconds=seconds, severity=severity, where=[s.where for s in sites])


# --- trace face ---
from pitstop.trace.check import TraceCheck, ms, pct  # noqa: E402


_NOT_HERE = ("aten::copy_", "aten::to", "aten::_to_copy")
_DEVICE_SYNC = ("cudaDeviceSynchronize", "hipDeviceSynchronize")


class SyncTrace(TraceCheck, tip="PIT201"):
    looks_at = "cudaStreamSynchronize / blocking cudaMemcpy (hip*) per step and the operator that caused each"
    impact_basis = "idle"  # GPU idle time: the doctor re-bases it on its observed step

    def check(self, rank, th):
        if not rank.steps or rank.idle is None:
            return
        sites = [s for s in rank.syncs.sites if s.call not in _DEVICE_SYNC and not s.cause.startswith(_NOT_HERE)]
        n = sum(s.count for s in sites)
        if n < rank.steps:
            return
        share = rank.idle.sync * n / max(rank.syncs.count, 1)
        top = "; ".join(f"{s.count} x {s.call} <- {s.cause}" for s in sites[:3])
        yield self.finding(
            th, rank, title="the host waits for the GPU every step", impact=share,
            evidence=(f"{n / rank.steps:.1f} syncs per step ({top}); the GPU idled {pct(share)} of the step after "
                      "them while the host caught up"),
            fix="keep values on the device (accumulate metrics as tensors) and read them (.item(), .cpu(), "
                "print) every N steps")
