"""``pitstop bench`` end to end: exit codes, near matches, the JSON schema, the HTML page."""

from __future__ import annotations

import json
import re

import pytest


def test_unknown_code_exits_2_with_near_matches(cli):
    out = cli("bench", "PIT10")
    assert out.returncode == 2
    assert "unknown code 'PIT10'" in out.stderr and "PIT101" in out.stderr and "PIT104" in out.stderr
    out = cli("bench", "PIT999")
    assert out.returncode == 2 and "unknown" in out.stderr


def test_tip_without_a_benchmark_exits_2(cli):
    out = cli("bench", "pin-memory")
    assert out.returncode == 2 and "PIT102 (pin-memory) has no benchmark" in out.stderr


def test_forcing_cuda_without_a_gpu_exits_2(cli):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = cli("bench", "PIT402", "--device", "cuda")
    assert out.returncode == 2 and "no CUDA device" in out.stderr


def test_list_shows_every_claim_without_running(cli):
    out = cli("bench", "--list")
    assert out.returncode == 0
    codes = re.findall(r"^(PIT\d{3}) ", out.stdout, flags=re.M)
    assert len(codes) == 11
    assert "[GPU only]" in out.stdout and "seed 002: with operator fusion" in out.stdout


def test_quick_json_and_html(cli, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from pitstop.bench.runner import json_schema

    page = tmp_path / "sub" / "bench.html"
    saved = tmp_path / "bench.json"
    out = cli("bench", "PIT402", "from-numpy", "PIT106", "--quick", "--device", "cpu",
              "--format", "json", "--html", str(page), "--json", str(saved))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert json.loads(saved.read_text(encoding="utf-8")) == data
    jsonschema.validate(data, json_schema())
    assert data["mode"] == "quick" and data["device"]["device"] == "cpu" and data["device"]["torch_threads"] == 1
    assert data["device"]["cpu_model"] and data["device"]["torch"]
    by_code = {r["code"]: r for r in data["results"]}
    assert list(by_code) == ["PIT105", "PIT106", "PIT402"]
    assert by_code["PIT106"]["verdict"] == "skipped" and "CUDA" in by_code["PIT106"]["reason"]
    assert by_code["PIT402"]["verdict"] == "confirmed" and by_code["PIT402"]["ratio"]["value"] == pytest.approx(2, rel=0.01)
    assert by_code["PIT105"]["claim"]["seed"] == "001" and by_code["PIT105"]["measurements"]
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert not re.search(r"""(src|href)=["']?https?:""", html), "the page must work offline"
    assert html.count('data-kind="bar"') == 2  # a chart per measured claim, none for the skipped one
    assert "Adam: twice the model size" in html and 'data-verdict="skipped"' in html


def test_text_and_markdown_formats(cli):
    out = cli("bench", "PIT402", "--quick", "--threads", "1")
    assert out.returncode == 0 and "PIT402" in out.stdout and "confirmed" in out.stdout
    assert "x param bytes" in out.stdout
    out = cli("bench", "PIT402", "--quick", "--threads", "1", "--format", "markdown")
    assert out.returncode == 0 and "| PIT402 |" in out.stdout and "Command: `pitstop bench PIT402" in out.stdout


def test_html_path_that_is_a_directory_exits_2_before_measuring(cli, tmp_path):
    out = cli("bench", "PIT402", "--quick", "--html", str(tmp_path))
    assert out.returncode == 2 and "is a directory" in out.stderr and out.stdout == ""
