"""PIT501's lint messages say what really runs: checked against the installed torch.

The rule picks its message from the optimizer class and the ``foreach``/``fused`` keywords
(pitstop/optim_impl.py: ``IMPLEMENTATION_KWARGS``, ``implementation``). Here the
table is compared with torch.optim's constructors, and every prediction with the
implementation a real ``step()`` runs, read from the profiler's op names (``aten::_fused_*``,
``aten::_foreach_*``, or neither: the per-parameter for-loop). The CUDA default (foreach when
every parameter is on an accelerator) is reproduced on CPU by letting PyTorch's default picker
count the CPU as a foreach device, which is the only thing that differs on CUDA.
"""

from __future__ import annotations

import importlib
import inspect
import itertools

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from pitstop.lint.runner import lint_source, rules_for
from pitstop.optim_impl import IMPLEMENTATION_KWARGS, implementation

OPTIMIZERS = sorted(n for n, c in vars(torch.optim).items()
                    if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer)


def test_the_keyword_table_matches_torch_optim():
    assert sorted(IMPLEMENTATION_KWARGS) == OPTIMIZERS
    for name in OPTIMIZERS:
        params = inspect.signature(getattr(torch.optim, name)).parameters
        assert IMPLEMENTATION_KWARGS[name] == {k for k in ("foreach", "fused") if k in params}, name


@pytest.fixture
def cuda_like_default(monkeypatch):
    """PyTorch's default picker treats CPU parameters as it treats CUDA ones (foreach)."""
    base = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the attribute
    supported = base._get_foreach_kernels_supported_devices
    monkeypatch.setattr(base, "_get_foreach_kernels_supported_devices", lambda: [*supported(), "cpu"])


def _runs(name: str, **kw) -> str:
    """The implementation one real step of ``torch.optim.<name>(..., **kw)`` runs."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(4, 4)
    try:
        opt = getattr(torch.optim, name)(params, lr=1e-2, **kw)
    except (TypeError, RuntimeError) as exc:
        return type(exc).__name__
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    ops = {e.name for e in prof.events()}
    if any(o.startswith("aten::_fused_") for o in ops):
        return "fused"
    return "foreach" if any(o.startswith("aten::_foreach_") for o in ops) else "for-loop"


SWITCHABLE = [n for n in OPTIMIZERS if IMPLEMENTATION_KWARGS[n]]


@pytest.mark.parametrize("name", SWITCHABLE)
def test_predicted_implementation_is_what_runs(name, cuda_like_default):
    for foreach, fused in itertools.product((None, False, True), repeat=2):
        kw = {k: v for k, v in (("foreach", foreach), ("fused", fused)) if v is not None}
        predicted = implementation(name, foreach, fused)
        predicted = "foreach" if predicted == "default" else predicted
        assert _runs(name, **kw) == predicted, (name, kw)


def test_default_on_cpu_is_the_for_loop_and_fused_false_alone_is_too():
    assert _runs("AdamW") == "for-loop" and implementation("AdamW") == "default"
    assert _runs("AdamW", fused=False) == "for-loop"


def test_keywords_a_class_does_not_take_raise_type_error():
    for name in ("RMSprop", "LBFGS", "SparseAdam"):
        takes = IMPLEMENTATION_KWARGS[name]
        for key in {"foreach", "fused"} - takes:
            with pytest.raises(TypeError):
                getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))], **{key: False})
            assert implementation(name, **{key: False}) == "TypeError"


def _messages(call: str) -> list[str]:
    src = f"import torch\nopt = torch.optim.{call}\n"
    return [f.message for f in lint_source(src, "t.py", rules_for(["PIT501"]))]


def test_messages_follow_the_class_and_keywords():
    # RMSprop has no fused=: never suggest it
    [m] = _messages("RMSprop(params, foreach=False)")
    assert "for-loop" in m and "fused=True" not in m and "RMSprop has no fused=" in m
    [m] = _messages("RMSprop(params, fused=False)")
    assert "RMSprop takes no fused= argument: this call raises TypeError" in m
    # explicit fused=False alone also turns foreach off (on CUDA too): a for-loop
    [m] = _messages("AdamW(params, fused=False)")
    assert m.startswith("AdamW(fused=False) runs the per-parameter for-loop") and "on CUDA too" in m
    # ... but not with foreach=True next to it
    [m] = _messages("AdamW(params, fused=False, foreach=True)")
    assert "runs the foreach implementation" in m and "for-loop" not in m
    [m] = _messages("AdamW(params, foreach=False, fused=True)")
    assert "has no effect next to fused=True" in m
    [m] = _messages("SGD(params, foreach=False)")
    assert "for-loop" in m and "or pass fused=True" in m
    m1, m2 = _messages("Adam(params, foreach=False, fused=False)")
    assert "drop foreach=False and fused=False" in m1 and "pass fused=True instead" in m2
    [m] = _messages("LBFGS(params, foreach=False)")
    assert "LBFGS takes no foreach= argument" in m
    [m] = _messages("Adafactor(params, foreach=False)")  # its default anyway, even on CUDA
    assert "also Adafactor's default" in m and "picks foreach" not in m
    [m] = _messages("AdamW(params, fused=False, foreach=use_foreach)")
    assert "for-loop runs unless foreach=True" in m


def test_every_message_agrees_with_the_prediction():
    """No message claims a for-loop where foreach or fused runs, nor suggests fused=True to a
    class without it."""
    values = {"absent": None, "None": None, "False": False, "True": True}
    for name in OPTIMIZERS:
        for (fe, fev), (fu, fuv) in itertools.product(values.items(), repeat=2):
            if "False" not in (fe, fu):
                continue
            kw = "".join(f", {k}={v}" for k, v in (("foreach", fe), ("fused", fu)) if v != "absent")
            takes = IMPLEMENTATION_KWARGS[name]
            for m in _messages(f"{name}(params{kw})"):
                runs = implementation(name, fev if "foreach" in takes else None, fuv if "fused" in takes else None)
                if "raises TypeError" not in m:
                    assert ("for-loop" in m.split(";")[0]) == (runs == "for-loop"), (name, kw, m)
                if "fused" not in takes:
                    assert "fused=True" not in m, (name, kw, m)
