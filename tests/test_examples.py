"""The bundled workloads: factories work, data is deterministic, naive scripts run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from pitstop.examples import SCRIPTS
from pitstop.examples.data import SyntheticImages, SyntheticTabular, SyntheticTokens
from pitstop.examples.models import make_cnn, make_gpt, make_mlp


def test_datasets_are_deterministic_and_shaped():
    a, b = SyntheticImages(n=8, work=1), SyntheticImages(n=8, work=1)
    x, y = a[3]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= y < 10
    assert torch.equal(x, b[3][0])
    assert not torch.equal(a[3][0], a[4][0])
    with pytest.raises(IndexError):
        a[8]
    idx, tgt = SyntheticTokens(n=4, block_size=16, vocab_size=50)[1]
    assert idx.shape == tgt.shape == (16,) and torch.equal(idx[1:], tgt[:-1])
    tab = SyntheticTabular(n=32, features=8)
    assert tab.x.shape == (32, 8) and len(tab) == 32 and set(tab.y) <= set(range(10))


def test_naive_and_clean_models_share_interfaces():
    for factory, x in ((make_cnn, torch.randn(2, 3, 32, 32)), (make_mlp, torch.randn(2, 64))):
        assert factory(naive=True)(x).shape == factory(naive=False)(x).shape == (2, 10)
    naive_cnn = make_cnn(naive=True)
    assert naive_cnn.features[0].bias is not None and make_cnn(naive=False).features[0].bias is None
    assert make_gpt(naive=True).wte.num_embeddings % 64 != 0 and make_gpt(naive=False).wte.num_embeddings % 64 == 0
    with pytest.raises(ValueError, match="block_size"):
        make_gpt(block_size=8)(torch.zeros(1, 9, dtype=torch.long))


def test_cnn_data_pipeline_does_per_sample_work(monkeypatch):
    """The CNN's per-sample transform does ``work`` blur passes over the whole image, so data
    loading has a real cost that scales with ``work`` (PIT101 is testable). Counted, not timed."""
    from pitstop.examples import data

    pixels = []
    real_blur = data._blur

    def counting_blur(img, passes):
        pixels.append(img.size * passes)
        return real_blur(img, passes)

    monkeypatch.setattr(data, "_blur", counting_blur)
    SyntheticImages(n=4, work=6)[0]
    SyntheticImages(n=4, work=2)[0]
    assert pixels == [3 * 32 * 32 * 6, 3 * 32 * 32 * 2]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_naive_script_runs(name):
    proc = subprocess.run([sys.executable, "-m", SCRIPTS[name], "--steps", "5", "--eval-every", "3"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(bool(re.match(r"step\s+\d+\s+loss ", line)) for line in lines) == 5
    assert lines[-1].startswith("done: 5 steps")
