"""``pitstop compare``: the noise-aware verdict on typed sides, a real pair of doctor runs
(a forward that sleeps vs one that does not), ``--fail-over`` exit codes and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from pitstop.compare import CompareInputError, Side, compare_sides, sniff
from pitstop.compare.model import FASTER, NO_SAMPLES, ONLY_A, ONLY_B, SAME, SLOWER

SLEEPY = FIXTURES / "compare" / "sleepy.py"


def side(steps, device="GPU X", **kw) -> Side:
    return Side(kind=kw.pop("kind", "doctor"), path="x", device=device, steps=tuple(steps), **kw)


NOISY = [1.00, 1.04, 0.97, 1.02, 0.99, 1.03, 0.98, 1.01]


def test_same_samples_shuffled_are_no_change():
    c = compare_sides(side(NOISY), side(list(reversed(NOISY))))
    assert c.step.verdict == SAME and c.step.low < 1 < c.step.high
    assert c.notes == ()


def test_thirty_percent_slower_beyond_noise_and_faster_the_other_way():
    slow = [x * 1.3 for x in NOISY]
    c = compare_sides(side(NOISY), side(slow), fail_over=10)
    assert c.step.verdict == SLOWER and c.step.low > 1 and c.failed
    assert compare_sides(side(NOISY), side(slow), fail_over=50).failed is False
    assert compare_sides(side(slow), side(NOISY)).step.verdict == FASTER


def test_a_shift_smaller_than_the_noise_is_no_change():
    wide = [0.6, 1.5, 0.8, 1.3, 0.7, 1.4, 1.0, 1.2]
    c = compare_sides(side(wide), side([x * 1.1 for x in reversed(wide)]), fail_over=5)
    assert c.step.verdict == SAME and not c.failed


def test_kernels_new_gone_single_samples_and_hardware_note():
    a = side([1.0], kind="trace", kernels={"gemm": (0.5,), "old": (0.1,)})
    b = side([1.4], device="GPU Y", kind="trace", kernels={"gemm": (0.9,), "new": (0.2,)})
    c = compare_sides(a, b)
    by = {d.name: d for d in c.kernels}
    assert by["gemm"].verdict == NO_SAMPLES and by["gemm"].ratio == pytest.approx(1.8)
    assert by["old"].verdict == ONLY_A and by["new"].verdict == ONLY_B
    assert c.kernels[0].name == "gemm"  # the largest change first
    assert any("different hardware" in n and "GPU X" in n and "GPU Y" in n for n in c.notes)
    d = c.to_dict()
    json.dumps(d)
    assert d["step"]["verdict"] == NO_SAMPLES and d["a"]["device"] == "GPU X"


def test_mixed_kinds_refused():
    with pytest.raises(ValueError):
        compare_sides(side([1.0]), side([1.0], kind="trace"))


def test_sniff(tmp_path):
    (tmp_path / "r.json").write_text('{"schema": 1, "target": "x", "steps": {"records": []}}')
    (tmp_path / "t.json").write_text('{"schemaVersion": 1, "traceEvents": []}')
    (tmp_path / "bad.json").write_text("not json at all")
    assert sniff(tmp_path / "r.json") == "doctor"
    assert sniff(tmp_path / "t.json") == "trace"
    assert sniff(tmp_path) == "trace"  # a folder of per-rank traces
    for bad in ("bad.json", "missing.json"):
        with pytest.raises(CompareInputError):
            sniff(tmp_path / bad)


def _doctor(warm_doctor, tmp: Path, name: str, sleep: float) -> Path:
    """The report ``pitstop doctor --format json`` prints, from a run forked from the test
    process's warm worker (``tests/doctor_warm.py``): the subject here is compare."""
    out = tmp / f"{name}.json"
    run = warm_doctor.report(SLEEPY, "--sleep", str(sleep), "--steps", "10", steps=6, warmup=1, probes=False)
    assert run.exit_code == 0, run.stderr[-2000:]
    out.write_text(json.dumps(run.data))
    return out


@pytest.fixture(scope="module")
def doctor_pair(tmp_path_factory, warm_doctor):
    tmp = tmp_path_factory.mktemp("compare")
    return _doctor(warm_doctor, tmp, "fast", 0.0), _doctor(warm_doctor, tmp, "slow", 0.25)


@pytest.mark.slow
def test_real_doctor_pair_slower_forward_and_fail_over_exit_codes(doctor_pair):
    fast, slow = doctor_pair
    r = run_cli("compare", str(fast), str(slow), "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "doctor" and d["a"]["steps"] == 6 and d["b"]["steps"] == 6
    assert d["step"]["verdict"] == SLOWER and d["step"]["change"] > 1.0
    phases = {p["name"]: p for p in d["phases"]}
    assert phases["forward"]["verdict"] == SLOWER and phases["forward"]["b"] > 0.2
    assert d["notes"] == []  # same script, same machine
    assert run_cli("compare", str(fast), str(slow), "--fail-over", "50").returncode == 1
    assert run_cli("compare", str(fast), str(slow), "--fail-over", "1000000").returncode == 0
    back = run_cli("compare", str(slow), str(fast), "--fail-over", "5")
    assert back.returncode == 0 and "faster" in back.stdout


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(doctor_pair, tmp_path):
    fast, _ = doctor_pair
    trace = tmp_path / "t.json"
    trace.write_text('{"schemaVersion": 1, "traceEvents": []}')
    garbage = tmp_path / "g.json"
    garbage.write_bytes(b"\x00\x01garbage")
    for a, b, words in ((fast, trace, "doctor"), (fast, garbage, "neither"), (fast, tmp_path / "nope.json", "no such")):
        r = run_cli("compare", str(a), str(b))
        assert r.returncode == 2, (a, b, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr
    assert run_cli("compare", str(fast), str(fast), "--fail-over", "-3").returncode == 2
