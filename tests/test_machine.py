"""pitstop.machine's CPU reading (torch-free) and the hardware note that explains a large bf16
slowdown: read from a planted /proc/cpuinfo, so the outcome never depends on the CPU running
the suite."""

from __future__ import annotations

import pytest

from pitstop.machine import LARGE_SLOWDOWN, CpuFeatures, HardwareNote, bf16_slowdown_note, cpu_features

EPYC_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse2 avx avx2 fma
processor\t: 1
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse2 avx avx2 fma
"""
XEON_AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8481C
flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile
"""


@pytest.fixture
def cpuinfo(tmp_path):
    def write(text):
        p = tmp_path / "cpuinfo"
        p.write_text(text)
        return cpu_features(str(p), environ={})  # not the suite's environment (it may cap oneDNN)
    return write


def test_cpu_features_read_the_model_and_the_bf16_flags(cpuinfo):
    epyc, xeon = cpuinfo(EPYC_AVX2), cpuinfo(XEON_AMX)
    assert epyc.model == "AMD EPYC 7B12" and "avx2" in epyc.flags and not epyc.native_bf16 and not epyc.amx
    assert xeon.native_bf16 and xeon.amx and xeon.known
    nothing = cpu_features("/nonexistent/cpuinfo", environ={})
    assert not nothing.known and not nothing.native_bf16 and nothing.model


def test_a_large_bf16_slowdown_is_explained_only_where_the_cpu_has_no_native_bf16(cpuinfo):
    epyc, xeon = cpuinfo(EPYC_AVX2), cpuinfo(XEON_AMX)
    note = bf16_slowdown_note(1 / 13, epyc)
    assert isinstance(note, HardwareNote) and note.slowdown == pytest.approx(13)
    assert note.text() == ("this CPU (AMD EPYC 7B12) has no native bf16 (no AVX512-BF16/AMX): bf16 measured "
                           "13.0x slower than fp32")
    assert HardwareNote.from_dict(note.to_dict()) == note
    assert bf16_slowdown_note(1 / 13, xeon) is None                    # the hardware does not explain it
    assert bf16_slowdown_note(LARGE_SLOWDOWN * 1.2, epyc) is None      # not a large slowdown
    assert bf16_slowdown_note(1.3, epyc) is None and bf16_slowdown_note(None, epyc) is None
    assert bf16_slowdown_note(1 / 13, CpuFeatures("unknown CPU")) is None  # flags not read: say nothing


def test_onednn_capped_below_avx512_bf16_has_no_native_bf16(cpuinfo, tmp_path):
    """ONEDNN_MAX_CPU_ISA=AVX2 on a CPU with AVX512-BF16 is what an AVX2-only CPU gets from
    oneDNN (bf16 measured 17.9x slower than fp32 on this machine's EPYC, docs/guide/hardware.md):
    the note names the cap, not missing flags."""
    from pitstop.machine import onednn_cap

    p = tmp_path / "cpuinfo"
    p.write_text(XEON_AMX)
    capped = cpu_features(str(p), environ={"ONEDNN_MAX_CPU_ISA": "avx2"})
    assert capped.cap == "AVX2" and capped.bf16_flags and not capped.native_bf16
    note = bf16_slowdown_note(1 / 17.9, capped)
    assert note is not None and note.cap == "AVX2" and note.missing == ()
    assert "capped at AVX2" in note.text() and "17.9x slower" in note.text()
    assert HardwareNote.from_dict(note.to_dict()) == note
    # DNNL_ is oneDNN's older spelling; ONEDNN_ wins when both are set; a cap at or above
    # AVX512_CORE_BF16, DEFAULT, ALL or an unknown name leaves bf16 native
    assert onednn_cap({"DNNL_MAX_CPU_ISA": "AVX512_CORE"}) == "AVX512_CORE"
    assert onednn_cap({"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX512_CORE_AMX"}) == "AVX2"
    for value in ("AVX512_CORE_BF16", "avx512_core_amx", "AVX10_1_512"):
        assert cpu_features(str(p), environ={"ONEDNN_MAX_CPU_ISA": value}).native_bf16, value
    for value in ("DEFAULT", "ALL", "AVX9000", ""):
        f = cpu_features(str(p), environ={"ONEDNN_MAX_CPU_ISA": value})
        assert f.cap is None and f.native_bf16, value
    assert bf16_slowdown_note(1 / 17.9, cpu_features(str(p), environ={})) is None
    # a CPU without the flags: the note says so, whatever the cap
    epyc = cpuinfo(EPYC_AVX2)
    assert "no AVX512-BF16/AMX" in bf16_slowdown_note(1 / 13, epyc).text()
