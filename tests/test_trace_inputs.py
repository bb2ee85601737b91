"""``pitstop trace`` on bad input, host-only, step-less and AMD traces, a folder of ranks,
and its JSON against docs/trace-schema.json."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

import trace_refs as refs
from conftest import ROOT
from pitstop.cli import main

needs_traces = pytest.mark.skipif(not refs.exists(), reason=refs.SKIP)
RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _run(capsys, *argv):
    code = main(["trace", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str, path, *words):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert str(path) in lines[0]
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("content,words", [
    (b"", ("empty",)),
    (b"hello, not json", ("not JSON",)),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', ("truncated JSON",)),
    (b'{"some": "thing"}', ("not a Kineto trace",)),
    (b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2}]', ("not a Kineto trace",)),
    (b'{"traceEvents": [{"ph": "X", "cat": "foo", "name": "a", "ts": 1, "dur": 2}]}', ("not a Kineto trace",)),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "late", "dur": 2}]}', ("not a Kineto trace",)),
])
def test_bad_json_is_one_line_and_exit_2(tmp_path, capsys, content, words):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    code, out, err = _run(capsys, p)
    assert code == 2 and not out
    _one_error_line(err, p, *words)


def test_truncated_and_broken_gzip(tmp_path, capsys):
    whole = gzip.compress(b'{"traceEvents": []}' * 1000)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    code, _, err = _run(capsys, cut)
    assert code == 2
    _one_error_line(err, cut, "truncated gzip")
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(whole[:10] + b"\x00" * 50 + whole[60:])
    code, _, err = _run(capsys, broken)
    assert code == 2
    _one_error_line(err, broken, "gzip")


def test_missing_file_and_empty_folder(tmp_path, capsys):
    code, _, err = _run(capsys, tmp_path / "nope.json")
    assert code == 2
    _one_error_line(err, tmp_path / "nope.json", "no such")
    code, _, err = _run(capsys, tmp_path)
    assert code == 2
    _one_error_line(err, tmp_path, "no trace files")


@needs_traces
def test_host_only_trace_says_so(capsys):
    code, out, _ = _run(capsys, refs.TRACES / "hta/distributed_info_unavailable/distributed_info_not_found.json.gz")
    assert code == 0
    assert "host-only trace" in out
    from pitstop.trace import analyze_file

    r = analyze_file(refs.TRACES / "hta/distributed_info_unavailable/distributed_info_not_found.json.gz")
    assert r.host_only and r.gpu is None and r.steps == 1 and r.device == "NVIDIA A100-PG509-200"


@needs_traces
def test_trace_without_steps_uses_the_gpu_span():
    from pitstop.trace import analyze_file

    r = analyze_file(refs.TRACES / "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")
    assert r.steps == 0 and r.step_time is None and r.window.basis == "gpu span"
    assert any("no ProfilerStep" in n for n in r.notes)
    assert r.dataloader.share is None


@needs_traces
@pytest.mark.parametrize("name,gpu,unlisted", [
    ("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz", "AMD Instinct MI300X VF", True),
    ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "AMD Radeon Graphics", False),
    ("tracelens/torch_compile_triton/trace.json.gz", "AMD Instinct MI300X", True),
])
def test_amd_traces(name, gpu, unlisted):
    from pitstop.trace import analyze_file

    r = analyze_file(refs.TRACES / name)
    assert r.vendor == "amd" and r.device == gpu
    # MI300X files: events on device 2, deviceProperties lists only id 0 (MI250: ids 0-3 listed)
    assert any("device id" in n for n in r.notes) == unlisted
    assert r.gpu.busy > 0


@needs_traces
def test_amd_precision_and_hip_syncs():
    from pitstop.trace import analyze_file

    r = analyze_file(refs.TRACES / "tracelens/torch_compile_triton/trace.json.gz")
    assert r.precision.by_precision.get("bf16", 0) > 0.5  # Cijk_..._BBS_... kernels
    m = analyze_file(refs.TRACES / "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz")
    assert [s.call for s in m.syncs.sites] == ["hipDeviceSynchronize"]


@needs_traces
def test_folder_of_ranks_runs_in_parallel_and_validates(tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    src = refs.TRACES / "hta/trace_diff"
    for sub in ("control", "test"):
        shutil.copy(src / sub / f"{sub}.json.gz", tmp_path / f"{sub}.json.gz")
    code, out, _ = _run(capsys, tmp_path, "--format", "json", "--workers", "2")
    assert code == 0
    doc = json.loads(out)
    schema = json.loads((ROOT / "docs" / "trace-schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert sorted(r["rank"] for r in doc["ranks"]) == [1, 3]
    assert all(r["gpu"]["busy"] > 0.8 for r in doc["ranks"])
    assert {f["rank"] for f in doc["findings"]} <= {1, 3, None}


@needs_traces
def test_json_of_single_files_validates(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "trace-schema.json").read_text())
    for name in (RESNET, "hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
                 "tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz"):
        code, out, _ = _run(capsys, refs.TRACES / name, "--format", "json")
        assert code == 0
        doc = json.loads(out)
        jsonschema.validate(doc, schema)
        r = doc["ranks"][0]
        assert {"rank", "world_size", "device", "steps", "step_time", "gpu", "kernels", "dataloader", "syncs"} <= set(r)


def test_trace_check_modules_stay_light():
    import subprocess
    import sys

    code = ("import sys, pitstop.catalog as t; t.load_all(); "
            "print(','.join(m for m in ('torch', 'numpy', 'msgspec') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""  # the trace checks load without torch, numpy or msgspec (pitstop lint loads them all)


def test_public_names_resolve():
    import pitstop.trace as pt

    for name in pt.__all__:
        assert getattr(pt, name) is not None, name
    with pytest.raises(AttributeError):
        pt.no_such_name  # noqa: B018


@needs_traces
def test_json_report_reads_back_equal(capsys):
    from pitstop.trace import TraceReport, trace

    report = trace([refs.TRACES / RESNET])
    code, out, _ = _run(capsys, refs.TRACES / RESNET, "--format", "json")
    assert code == 0
    back = TraceReport.from_dict(json.loads(out))
    assert back.ranks[0].dataloader == report.ranks[0].dataloader
    assert back.findings == report.findings and back.ranks[0].kernels == report.ranks[0].kernels
