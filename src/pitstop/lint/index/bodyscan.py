"""Facts the project index reads from the bodies of a file's classes and functions (a line scan, no parse):
Dataset classes that put items on the device, collate functions that pad or move to the device, and loss
functions that return a batch's sum (for :mod:`pitstop.lint.index.project`)."""

from __future__ import annotations

import bisect
import re

__all__ = ["blocks", "on_device", "pad_functions", "device_functions", "batch_sum_losses", "loads_pretrained",
           "ddp_helpers",
           "TO_DEVICE", "CLASS", "DEF"]

CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.M)
DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
TO_DEVICE = re.compile(r"\.cuda\(|\.to\(\s*(?:self\.)?(?:device|accelerator\.device|[\"']cuda)|"
                       r"\bdevice\s*=\s*(?:self\.)?(?:device|accelerator\.device|[\"']cuda)")
#: a return that multiplies by the batch size: the batch's sum, not its mean (``return (lbox + lobj) * bs``)
_SUM_RETURN = re.compile(r"^[ \t]*return[ \t]+[^\n]*\*[ \t]*(?:self\.)?(?:bs|bsz|batch_size|batch|n_batch|nb)\b", re.M)


def blocks(text: str, pattern: re.Pattern, group: int) -> dict:
    """name -> indented body (comments stripped) of the first ``class``/``def`` of that name."""
    lines = text.split("\n")  # as ``starts`` counts them (splitlines() also breaks at \x0c)
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    out: dict = {}
    for m in pattern.finditer(text):
        name = m[group]
        if name in out:
            continue
        first = bisect.bisect_right(starts, m.start()) - 1
        head = lines[first] if 0 <= first < len(lines) else ""
        indent = len(head.expandtabs()) - len(head.expandtabs().lstrip())
        body = []
        for line in lines[first + 1:]:
            code = line.split("#", 1)[0]
            if code.strip() and len(line.expandtabs()) - len(line.expandtabs().lstrip()) <= indent:
                break
            body.append(code)
        out[name] = "\n".join(body)
    return out


def on_device(text: str, datasets) -> frozenset:
    if not datasets or not TO_DEVICE.search(text):
        return frozenset()
    bodies = blocks(text, CLASS, 1)
    return frozenset(n for n in datasets if TO_DEVICE.search(bodies.get(n, "")))


_PAD = re.compile(r"\.pad\(|pad_sequence\(")
_IO = re.compile(r"\bopen\(|Image|imread|decode|load|read|\btokenizer\(|\.encode\(")


def pad_functions(text: str) -> frozenset:
    return frozenset(n for n, body in blocks(text, DEF, 2).items() if _PAD.search(body) and not _IO.search(body))


def device_functions(text: str) -> frozenset:
    return frozenset(n for n, body in blocks(text, DEF, 2).items() if TO_DEVICE.search(body))




def batch_sum_losses(text: str) -> frozenset:
    """Functions, and classes through their ``__call__``/``forward``, whose return multiplies by the batch size."""
    if not _SUM_RETURN.search(text):
        return frozenset()
    out = {n for n, body in blocks(text, DEF, 2).items() if _SUM_RETURN.search(body)}
    for name, body in blocks(text, CLASS, 1).items():
        if any(_SUM_RETURN.search(b) for m, b in blocks(body, DEF, 2).items() if m in ("__call__", "forward")):
            out.add(name)
    return frozenset(out - {"__call__", "forward"})


#: code that loads trained weights into a model of the project: whichever file defines the model, the weights
#: have its parameters (a state-dict converter, ``from_pretrained``, a lenient ``strict=False`` load)
_LOADS_WEIGHTS = re.compile(r"\bfrom_pretrained\(|load_state_dict\([^)\n]*strict\s*=\s*False|\bconvert\w*state_dict\w*\(")
#: in the model's own file: a ``pretrained`` option, or a notice that it was ported from elsewhere
_PRETRAINED_HERE = re.compile(r"\bpretrained\s*[:=]|\bload_pretrained\w*\(")
_PORTED = re.compile(r"(?:ported|adapted|modified|referred|copied|borrowed|taken)(?:\s+and\s+modified)?\s+from\s*:?\s*"
                     r"https?://", re.I)


def loads_pretrained(text: str) -> tuple[bool, bool]:
    """(the code loads trained weights into some model, the file's own models are pretrained or ported)."""
    code = re.sub(r"#[^\n]*", "", text)
    loads = _LOADS_WEIGHTS.search(code) is not None
    return loads, loads or _PRETRAINED_HERE.search(code) is not None or _PORTED.search(text[:4000]) is not None


_DDP = re.compile(r"\bDistributedDataParallel\s*\(|\bDDP\s*\(")


def ddp_helpers(text: str) -> frozenset:
    """Functions whose body wraps a model in DistributedDataParallel (``def smart_DDP(model): return DDP(model, ...)``)."""
    if not _DDP.search(text):
        return frozenset()
    return frozenset(n for n, body in blocks(text, DEF, 2).items() if _DDP.search(body))
