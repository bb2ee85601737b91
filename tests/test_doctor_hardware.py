"""The doctor's bf16 answer follows the CPU it is told about, on whatever CPU runs the suite.

Each case injects a CPU description (``pitstop doctor --cpuinfo FILE``, files in
``tests/fixtures/cpus/``) and, where the description has no native bf16, caps oneDNN at AVX2
(``ONEDNN_MAX_CPU_ISA=AVX2``, ATen at ``avx2``) so that this machine runs the kernels such a CPU
gets, whatever it has itself. No outcome is assumed: whichever ratio the bf16 probe measures,
the report must follow it (PIT301 only past the gate) and explain a large slowdown exactly when
the described CPU has no native bf16, naming why (flags missing, or oneDNN capped):

- ``avx2-only``: no AVX512-BF16/AMX flags, oneDNN capped: the note names the missing flags. An
  AVX512-BF16 machine running this suite takes the branch an AVX2-only one would.
- ``avx512bf16-capped``: the flags are there, oneDNN is capped below them: the note names the cap.
- ``avx512bf16``, ``amx``: native bf16, nothing capped (runs forked from the warm worker): never
  a hardware note, whatever this machine measures.

Inductor's on-disk cache is kept apart for the capped runs: on torch 2.13 its key does not
follow ``ATEN_CPU_CAPABILITY``, and a kernel compiled under one vector ISA, loaded under the
other, gave wrong values here (docs/guide/hardware.md)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import FIXTURES, ROOT, run_cli

pytestmark = pytest.mark.slow

CAPPED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
CPUS = FIXTURES / "cpus"
#: case id -> (CPU description, oneDNN capped at AVX2 in the run's environment)
CASES = {"avx2-only": ("avx2_only.cpuinfo", True), "avx512bf16-capped": ("avx512_bf16.cpuinfo", True),
         "avx512bf16": ("avx512_bf16.cpuinfo", False), "amx": ("amx.cpuinfo", False)}
# batch 8: the probes time 8 samples instead of 16, and emulated bf16 (~16x slower than fp32
# under the cap here) is most of a capped run's CPU (25.6 -> 13.1 s CPU, same note and verdict rule)
ARGS = ("--eval-every", "2", "--batch-size", "8")


#: runs of a case when the bf16 probe had no time: the probes take at most half the observed
#: steps' time (1 s each at least) and, on a loaded machine (the suite beside other tests' jobs), a
#: probe that cannot fit its rounds is skipped and says so. Such a run says nothing of the CPU
#: under test, so it is run again (seen once in a whole-suite run: the ``amx`` case on 2 cores).
RUNS = 3


def _crowded_out(d: dict) -> bool:
    skipped = d["probes"]["precision"].get("skipped", "")
    return "share of the probes' time" in skipped or "ran out of time" in skipped


def _run(case: str, tmp_path_factory, warm_doctor) -> dict:
    name, capped = CASES[case]
    if not capped:  # nothing read from the environment at torch's import: a warm run
        run = warm_doctor.report(None, *ARGS, module="pitstop.examples.cnn", steps=3, warmup=1, cpuinfo=CPUS / name)
        assert run.exit_code == 0, run.stderr[-3000:]
        return run.data
    env = {**CAPPED, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path_factory.mktemp("inductor-avx2"))}
    out = run_cli("doctor", "--format", "json", "--steps", "3", "--warmup", "1", "--cpuinfo", str(CPUS / name),
                  "-m", "pitstop.examples.cnn", "--", *ARGS, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module", params=list(CASES))
def report(request, tmp_path_factory, warm_doctor):
    for _ in range(RUNS):
        d = _run(request.param, tmp_path_factory, warm_doctor)
        if not _crowded_out(d):
            break
    return request.param, d


def test_the_report_names_the_described_cpu_and_follows_the_schema(report):
    case, d = report
    name, capped = CASES[case]
    jsonschema.validate(d, json.loads((ROOT / "docs" / "doctor-schema.json").read_text(encoding="utf-8")))
    cpu = d["observations"]["processor"]
    described = (CPUS / name).read_text(encoding="utf-8")
    assert cpu["model"] in described and cpu["source"] == str(CPUS / name)
    assert ("avx512_bf16" in cpu["flags"]) == ("avx512_bf16" in described)
    assert cpu["native_bf16"] == (case in ("avx512bf16", "amx"))
    assert ("oneDNN capped at AVX2" in d["observations"]["device_name"]) == capped
    assert f"CPU described by {CPUS / name}" in d["observations"]["device_name"]
    assert d["check_errors"] == []


def test_bf16_verdict_and_hardware_note_follow_the_measured_ratio_and_the_cpu(report):
    from pitstop.machine import BF16_FLAGS, LARGE_SLOWDOWN

    case, d = report
    p = d["probes"]["precision"]
    assert "skipped" not in p, f"the bf16 probe had no time in {RUNS} runs: {p['skipped']}"
    assert p["baseline"] == "fp32" and p["dtype"] == "bfloat16"
    best = p["speedups"]["bfloat16"]
    found = {f["code"] for f in d["findings"]}
    assert ("PIT301" in found) == (best["low"] >= 1.10)
    note = p.get("hardware")
    if case in ("avx512bf16", "amx") or best["ratio"] > LARGE_SLOWDOWN:
        assert note is None, note  # native bf16 never "explains" a slowdown; a small one needs no note
        return
    # bf16 is not native on the described CPU: one timed round that measured it this slow settles
    # the probe (the hardware's answer), not 8 rounds of emulated bf16
    assert p["runs"] == 1 and "without native bf16" in p["settled"], p
    assert note is not None and note["slowdown"] == pytest.approx(1 / best["ratio"])
    assert "slower than fp32" in note["text"] and "Injected" in note["cpu"]
    if case == "avx2-only":  # the CPU lacks the flags: the cap is beside the point
        assert note["missing"] == list(BF16_FLAGS) and "cap" not in note
        assert "has no native bf16 (no AVX512-BF16/AMX)" in note["text"]
    else:
        assert note["cap"] == "AVX2" and note["missing"] == []
        assert "capped at AVX2" in note["text"]


def test_a_cpu_description_that_is_not_one_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "cpuinfo"
    bad.write_text("model name : something\n", encoding="utf-8")
    out = run_cli("doctor", "--cpuinfo", str(bad), "-m", "pitstop.examples.cnn")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert str(bad) in out.stderr and "flags" in out.stderr
    missing = run_cli("doctor", "--cpuinfo", str(tmp_path / "absent"), "-m", "pitstop.examples.cnn")
    assert missing.returncode == 2 and str(tmp_path / "absent") in missing.stderr
