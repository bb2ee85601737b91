"""PIT608 graph-breaks: a compiled forward split into pieces by code dynamo cannot trace."""

from __future__ import annotations

from pitstop.catalog import Tip


class GraphBreaks(Tip):
    code = "PIT608"
    slug = "graph-breaks"
    title = "Compiled forward broken into several graphs with eager code between them"
    faces = "LDK"
    seeds = ()
    truth = (
        "Beyond the seeds; extends PIT601. A graph break is not an error: the model still runs "
        "and gives the same results, which is why it goes unnoticed. Each break ends one graph "
        "and starts another, with the code between them run eagerly by Python; fusion cannot "
        "cross it, and a break that reads a tensor value (`.item()`) also makes the host wait "
        "for the device. `TORCH_LOGS=graph_breaks` prints each break with its reason and line; "
        "`torch.compile(model, fullgraph=True)` turns the first one into an error."
    )

    what = """
        Finds the places where TorchDynamo stops tracing a compiled function or module and falls
        back to Python: a `.item()`, `.tolist()` or `.numpy()` in `forward`, a `print` of a
        tensor, a Python `if` on a tensor's value, or a call dynamo does not support. Each break
        is reported with dynamo's reason and the user's `file:line`.
    """
    why = """
        `torch.compile` fuses the ops of one graph. At a break dynamo compiles what it has traced
        so far, runs the offending code in Python, and starts a new graph after it. The model
        runs as several smaller graphs with eager glue between them: less fusion, more kernel
        launches and, where the break reads a tensor's value, a host-device synchronisation in
        every call. A break inside a loop over layers repeats once per layer.
    """
    example = """
        ```python
        class Net(nn.Module):
            def forward(self, x):
                h = self.encoder(x)
                if h.abs().max().item() > 10:   # reads a value: graph break + sync
                    h = h / 10
                return self.head(h)

        model = torch.compile(Net())
        ```
    """
    use_instead = """
        Keep the decision on the device, so the whole forward is one graph:
        ```python
        def forward(self, x):
            h = self.encoder(x)
            scale = torch.where(h.abs().amax() > 10, 0.1, 1.0)
            return self.head(h * scale)
        ```
        For a real branch use `torch.cond(pred, true_fn, false_fn, (h,))`; move logging and
        `.item()` reads out of `forward` into the loop, every N steps. Check with
        `TORCH_LOGS=graph_breaks python train.py` or `torch.compile(model, fullgraph=True)`.
    """
    when_not = """
        A break at the very start or end of `forward` (e.g. a log line after the last layer)
        costs one extra graph boundary and little else. When the model is dominated by a few
        large matmuls or convolutions, the fused glue is a small share of the step and removing
        breaks changes little. On code that is not compiled there are no graph breaks: the same
        `.item()` is then a plain synchronisation (PIT201).
    """
    references = (
        "PyTorch docs, torch.compile troubleshooting (graph breaks): https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
        "PyTorch docs, torch.cond: https://pytorch.org/docs/stable/generated/torch.cond.html",
        "PyTorch docs, torch._dynamo.explain / TORCH_LOGS: https://pytorch.org/docs/stable/torch.compiler_faq.html",
    )
