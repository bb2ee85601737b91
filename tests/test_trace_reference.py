"""``pitstop trace`` against the reference answers of ../shared/traces/README.md (the
TensorBoard plugin, TraceLens, HolisticTraceAnalysis, and the README's own measurements)."""

from __future__ import annotations

import gzip
import shutil
from functools import lru_cache

import pytest

import trace_refs as refs

pytestmark = pytest.mark.skipif(not refs.exists(), reason=refs.SKIP)

HTA_TOL = TRACELENS_TOL = PLUGIN_TOL = 0.02
#: HTA files whose answer the README says HTA reaches by another definition:
#: cuda_sync events counted as GPU activity; the MI210 GPU-only trace, where TraceLens
#: (busy 89.36%) and the README's measurement (89.4%) agree and HTA does not (80%).
HTA_DIFFERS = {"`hta/critical_path/cuda_event_sync`", "`tracelens/mi210/gpu_only_trace`"}
#: HTA fails on the Qwen file with rounding on; the README gives its answer with rounding off.
QWEN_NO_ROUNDING = (0.0807, 0.9150, 0.0043)


@lru_cache(maxsize=None)
def _analyze(path: str):
    from pitstop.trace import analyze_file

    return analyze_file(path)


@lru_cache(maxsize=None)
def _report(path: str):
    from pitstop.trace import trace

    return trace([path])


def _hta_params():
    if not refs.exists():
        return []
    return [pytest.param(r, id=r[0].strip("`")) for r in refs.hta_rows()]


def _measured_params():
    if not refs.exists():
        return []
    return [pytest.param(r, id=r[0]) for r in refs.measured_rows()]


@pytest.mark.parametrize("row", _hta_params())
def test_hta_temporal_breakdown(row):
    if row[0] in HTA_DIFFERS:
        pytest.skip("README: HTA counts other events as GPU activity here")
    r = _analyze(str(refs.find(row[0])))
    got = (r.span.idle, r.span.compute, r.span.non_compute)
    want = QWEN_NO_ROUNDING if "fails" in row[1] else tuple(refs.pct(c) for c in row[1:4])
    for g, w in zip(got, want):
        assert abs(g - w) <= HTA_TOL, (row[0], got, want)


@pytest.mark.parametrize("row", _measured_params())
def test_readme_measurements(row):
    name, steps, median, busy, _whole, launched, comm, mem, syncs, dl, top = row
    r = _analyze(str(refs.TRACES / name))
    assert r.steps == int(steps)
    if median != "—":
        assert r.step_time.median * 1e3 == pytest.approx(float(median.replace(",", "")), abs=0.06)
    if busy == "—":
        assert r.gpu is None and r.host_only
        return
    assert r.gpu.busy == pytest.approx(refs.pct(busy), abs=0.0006)
    if launched != "—":
        assert r.gpu.busy_launched == pytest.approx(refs.pct(launched), abs=0.0006)
    assert r.kernels.communication_share == pytest.approx(refs.pct(comm), abs=0.0006)
    assert r.kernels.memory_share == pytest.approx(refs.pct(mem), abs=0.0006)
    assert r.syncs.per_step == pytest.approx(float(syncs.split()[0]), abs=0.05)
    if dl != "—":
        assert r.dataloader.host_share == pytest.approx(refs.pct(dl), abs=0.0006)
    assert r.kernels.top[0].name.removeprefix("void ").replace("(anonymous namespace)", "(anon)").startswith(top.strip("`").rstrip(".").rstrip("…"))


PLUGIN_0 = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
PLUGIN_4 = "kineto-tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"


def test_plugin_dataloader_share_and_recommendations():
    r0, r4 = _report(str(refs.TRACES / PLUGIN_0)), _report(str(refs.TRACES / PLUGIN_4))
    assert abs(r0.ranks[0].dataloader.share - 0.3337) <= PLUGIN_TOL
    assert abs(r4.ranks[0].dataloader.share - 0.0084) <= PLUGIN_TOL
    codes0, codes4 = {f.code for f in r0.findings}, {f.code for f in r4.findings}
    assert "PIT101" in codes0 and "PIT101" not in codes4
    assert "PIT301" in codes0 and "PIT301" in codes4
    # the plugin's top kernel and top operator by GPU self time
    assert "dgrad_engine<float, 512" in r0.ranks[0].kernels.top[0].name
    assert r0.ranks[0].top_operators[0].name == "aten::cudnn_convolution_backward_weight"


@pytest.mark.parametrize("name,busy", [
    ("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", 0.0792),
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", 0.9144),
    ("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz", 0.1118),
    ("tracelens/mi210/gpu_only_trace/gpu_only_trace.json.gz", 0.8936),
])
def test_tracelens_busy(name, busy):
    r = _analyze(str(refs.TRACES / name))
    assert abs(r.gpu.busy_launched - busy) <= TRACELENS_TOL
    assert abs((1 - r.gpu.busy_launched) - (1 - busy)) <= TRACELENS_TOL


@pytest.mark.parametrize("name", ["hta/nccl_parser_config/nccl_data.json.gz",
                                  "hta/df_index_resolver/df_index_resolver.json.gz",
                                  "hta/trace_diff/control/control.json.gz"])
def test_nccl_dev_kernel_naming_gives_the_same_answers(name, tmp_path):
    src = refs.TRACES / name
    data = gzip.decompress(src.read_bytes())
    assert b"ncclKernel" in data
    renamed = tmp_path / "renamed.json.gz"
    renamed.write_bytes(gzip.compress(data.replace(b"ncclKernel", b"ncclDevKernel"), compresslevel=1))
    a, b = _report(str(src)), _report(str(renamed))
    ra, rb = a.ranks[0], b.ranks[0]
    assert ra.kernels.communication_share > 0.1
    assert rb.kernels.communication_share == pytest.approx(ra.kernels.communication_share)
    assert rb.kernels.communication_overlap == pytest.approx(ra.kernels.communication_overlap)
    assert (rb.span.idle, rb.span.compute) == pytest.approx((ra.span.idle, ra.span.compute))
    assert [(f.code, f.impact) for f in b.findings] == [(f.code, f.impact) for f in a.findings]
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("row", _measured_params())
def test_every_shared_trace_gives_schema_valid_json(row):
    import json

    jsonschema = pytest.importorskip("jsonschema")
    from pitstop.jsoncodec import dumps
    from pitstop.trace import TraceReport

    schema = json.loads((refs.ROOT / "docs" / "trace-schema.json").read_text())
    r = _analyze(str(refs.TRACES / row[0]))
    doc = json.loads(dumps(TraceReport(ranks=(r,), findings=(), stragglers=()).to_dict()))
    jsonschema.validate(doc, schema)
