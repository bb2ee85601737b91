"""The windowed trace reader (pitstop.trace.stream): the same timeline as reading the file whole,
whatever the window, layout or tricky content; bounded memory; broken files still one line."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc

import msgspec
import numpy as np
import pytest

import trace_refs as refs
import trace_synth as synth
from pitstop.cli import main
from pitstop.trace.load import load_timeline, read_whole, read_windows
from pitstop.trace.stream import NotStreamable, TraceWindows
from pitstop.trace.wire import META_FIELDS

TRICKY = ["fn}, {x", 'say "traceEvents": [', "a\\\"}, {\\\"b", "]}, {[", "ProfilerStep#x"]


def _tables(builder):
    out = [builder.known, builder.events, builder.old, sorted(builder.gpu_devices),
           sorted(builder.steps, key=lambda s: s.start)]
    for t in (builder.gpu, builder.runtime, builder.ops, builder.python):
        table = t.table()
        for name in table.__dataclass_fields__:
            v = getattr(table, name)
            out.append((v.dtype.str, v.tobytes()) if isinstance(v, np.ndarray) else v)
    return out


def _flat(obj):
    if isinstance(obj, np.ndarray):
        return obj.dtype.str, obj.tobytes()
    if hasattr(obj, "__dataclass_fields__"):
        return [_flat(getattr(obj, f)) for f in obj.__dataclass_fields__]
    return obj


def _timeline(tl):
    return [_flat(getattr(tl, f)) for f in tl.__dataclass_fields__]


def _same(path, window):
    meta, streamed = read_windows(path, window)
    whole_meta, whole = read_whole(path)
    assert _tables(streamed) == _tables(whole)
    for key in META_FIELDS:
        assert getattr(meta, key) == getattr(whole_meta, key), key


def _doc(events: int = 400) -> dict:
    s = synth.training(steps=max(events // 40, 2), short_kernels=6, pageable=True, memsets=2, rank=1, world=4)
    for i, ev in enumerate(s.events):  # strings that look like JSON structure, nested lists of objects
        if ev["cat"] == "cpu_op":
            ev["name"] = TRICKY[i % len(TRICKY)] + ev["name"]
            ev["args"]["Input Dims"] = [{"a": [1, {"b": "}, {"}]}, {"c": 2}]
    return s.doc()


def _write(tmp_path, doc, name, *, indent=None, head_last=False):
    if head_last:  # every other key after the list, as some writers order them
        doc = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}
    data = json.dumps(doc, indent=indent).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("indent,head_last,name", [(None, False, "t.json"), (1, False, "t.json.gz"),
                                                    (None, True, "t.json.gz"), (2, True, "t.json")])
@pytest.mark.parametrize("window", [1024, 4096, 1 << 20])
def test_windows_read_what_the_whole_file_reads(tmp_path, indent, head_last, name, window):
    path = _write(tmp_path, _doc(), name, indent=indent, head_last=head_last)
    _same(path, window)


@pytest.mark.skipif(not refs.exists(), reason=refs.SKIP)
@pytest.mark.parametrize("window", [4096, 1 << 16])
def test_shared_traces_read_the_same_in_small_windows(window):
    for path in sorted(refs.TRACES.rglob("*.json*")):
        if path.name.endswith((".json", ".json.gz")):
            _same(path, window)


def test_windows_never_hold_the_file(tmp_path):
    path = _write(tmp_path, _doc(4000), "t.json")
    size, window = path.stat().st_size, 8192
    with open(path, "rb") as fh:
        reader = TraceWindows(fh, window)
        held, counts = [], []
        for events in reader.events():
            held.append(len(reader.buf))
            counts.append(len(events))
    assert len(counts) > 20 and sum(counts) == len(_doc(4000)["traceEvents"])
    assert max(held) <= 2 * window < size / 30  # at most two windows of bytes, never the file
    assert max(counts) < sum(counts) / 10


def test_memory_stays_well_below_the_file(tmp_path):
    doc = _doc(400)
    doc["traceEvents"] *= 300  # ~20 MB of JSON
    path = _write(tmp_path, doc, "big.json")
    size = path.stat().st_size
    assert size > 10e6
    tracemalloc.start()
    try:
        timeline = load_timeline(path, window=1 << 18)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(timeline.gpu.start) > 0
    # the columns and a few windows (about 0.45x here); reading the file whole holds its bytes and more (3x)
    assert peak < size, (peak, size)


def test_a_file_the_windows_cannot_cut_is_read_whole(tmp_path):
    path = _write(tmp_path, _doc(), "t.json")
    with pytest.raises(NotStreamable):
        read_windows(path, 64)  # every candidate cut inside an event: the reader gives up
    assert _timeline(load_timeline(path, window=64)) == _timeline(load_timeline(path))


@pytest.mark.parametrize("content", [
    b'{"traceEvents": [1, 2]}', b'{"a": {"traceEvents": [{}]}}', b'{"traceEvents": [{"ph": "X"}], "traceEvents": []}',
    b'{"deviceProperties": [], "traceEvents": [], "deviceProperties": []}', b"", b"   ",
])
def test_unexpected_layouts_are_left_to_the_whole_read(content):
    with pytest.raises((NotStreamable, msgspec.DecodeError)):
        list(TraceWindows(io.BytesIO(content), 64).events())


def _one_error(capsys, path, *words):
    assert main(["trace", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert not out and len(lines) == 1 and str(path) in lines[0]
    for w in words:
        assert w in lines[0], lines[0]


def test_broken_after_many_windows_is_still_one_line(tmp_path, capsys):
    data = json.dumps(_doc(2000)).encode()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) * 9 // 10])
    _one_error(capsys, cut, "truncated JSON")
    doc = _doc(2000)
    bad_at = len(doc["traceEvents"]) - 3
    doc["traceEvents"][bad_at]["ts"] = "late"
    bad = _write(tmp_path, doc, "bad.json.gz")
    _one_error(capsys, bad, "not a Kineto trace", f"traceEvents[{bad_at}]")
