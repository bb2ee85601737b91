"""Property tests (hypothesis): the linter never crashes on valid Python, and fixes never
produce code that does not parse, whatever the code around them."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from pitstop.lint.context import FileContext
from pitstop.lint.runner import ParseError, all_rule_classes, fix_source, is_valid_python, lint_source, rules_for

ALL = rules_for(all_rule_classes())
SETTINGS = settings(max_examples=40, deadline=None)

# Statements with problems (most of them fixable), combined and nested at random below.
FRAGMENTS = [
    "x = x.to(device)", "y = y.cuda()", "a = torch.zeros(3, 4).cuda()", "b = torch.randn(8).to('cuda:0')",
    "c = torch.arange(n).to(self.device)", "v = x.permute(0, 2, 1).view(b, -1)", "losses.append(loss)",
    "total += loss", "total = total + loss", "optimizer.zero_grad(set_to_none=False)", "p.grad.zero_()",
    "torch.cuda.reset_max_memory_allocated()", "y2 = checkpoint(block, x)", "s = torch.cuda.amp.GradScaler()",
    "t = torch.tensor(np.zeros(3))", "m = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16))",
    "loss = model(x).sum()", "loss.backward()", "optimizer.step()", "print(loss.item())",
    "w = a", "w += 1", "a = torch.ones(2)", "z = (torch.zeros(2)).cuda()  # comment",
    "q = torch.zeros(2,).to(device=dev,)", "r = x.to(device,)",
]
HEADERS = ["for x, y in loader:", "for step, (x, y) in enumerate(train_loader):", "def evaluate(model):",
           "with torch.no_grad():", "with torch.cuda.amp.autocast():", "if step % 10 == 0:", "while True:"]
PRELUDE = ("import numpy as np\nimport torch\nfrom torch import nn\n"
           "from torch.utils.checkpoint import checkpoint\ndevice = 'cuda'\n")


@st.composite
def programs(draw, depth=0):
    body = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 3 and draw(st.booleans()):
            header = draw(st.sampled_from(HEADERS))
            inner = draw(programs(depth + 1))
            body.append(header + "\n" + textwrap.indent(inner, "    "))
        else:
            body.append(draw(st.sampled_from(FRAGMENTS)))
    return "\n".join(body) + "\n"


@SETTINGS
@given(programs())
def test_fixes_always_leave_valid_python_and_settle(body):
    src = PRELUDE + body
    assert is_valid_python(src)
    fixed, remaining, applied, note = fix_source(src, "gen.py", ALL, unsafe=True)
    assert is_valid_python(fixed), fixed
    assert fix_source(fixed, "gen.py", ALL, unsafe=True)[0] == fixed  # idempotent
    assert not any(f.fix for f in remaining) or note


def _grammar() -> st.SearchStrategy[str]:
    """hypothesmith's whole-grammar strategy, built when the test first draws from it: importing
    hypothesmith and building its grammar costs ~1.5 s of CPU here (2-core AMD EPYC), which every
    pytest-xdist worker would otherwise pay while collecting, whether it runs this test or not."""
    import hypothesmith

    return hypothesmith.from_grammar()


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(st.deferred(_grammar))
def test_linter_never_crashes_on_valid_python(src):
    try:
        findings = lint_source(src, "gen.py", ALL)
    except ParseError:  # the grammar allows a few things CPython refuses; those are errors, not crashes
        return
    assert all(f.line >= 1 and f.column >= 1 for f in findings)


ALIASES = """
import torch as T
import torch.nn as nn
from torch.utils.data import DataLoader as DL
from torch import optim
import numpy as np
import torch.utils.data
a = T.optim.AdamW(p)
b = DL(ds)
c = nn.Linear(3, 4)
d = optim.SGD(p)
e = np.zeros(3)
f = torch.utils.data.DataLoader(ds)
def g(T):
    return T.zeros(3)
class K:
    nn = 1
    def m(self):
        return nn.ReLU()
"""


def test_name_resolution_agrees_with_libcst_qualified_names():
    module = cst.parse_module(ALIASES)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    qnames = wrapper.resolve(QualifiedNameProvider)
    ours = {}

    class Probe:
        tip = "PIT000"
        hooks = {"Call": (("visit_Call",), ())}

        def __init__(self, ctx):
            self.ctx = ctx

        def visit_Call(self, node):
            ours[node] = self.ctx.call_name(node)

        def finish(self):
            pass

    FileContext(module, [Probe]).run()
    assert len(ours) == 8
    for call, mine in ours.items():
        value = qnames[call.func]
        value = value() if callable(value) else value  # libcst computes qualified names lazily
        theirs = {q.name for q in value if q.source.name != "LOCAL"}
        if mine is None:
            assert not theirs or all(not t.startswith(("torch", "numpy")) for t in theirs), (mine, theirs)
        else:
            assert mine in theirs, (mine, theirs)
    assert sorted(v for v in ours.values() if v) == [
        "numpy.zeros", "torch.nn.Linear", "torch.nn.ReLU", "torch.optim.AdamW", "torch.optim.SGD",
        "torch.utils.data.DataLoader", "torch.utils.data.DataLoader"]
