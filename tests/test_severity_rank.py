"""The one ranking of findings (pitstop.severity): wrong results before cost at equal severity."""

from __future__ import annotations

from pitstop.findings import Finding
from pitstop.severity import settle


def _f(code: str, severity: str, kind: str = "time", share: float | None = None, summary: bool = False) -> Finding:
    return Finding(code=code, title=code, evidence="e", fix="f", severity=severity, impact_kind=kind,
                   impact_share=share, summary=summary)


def test_a_high_correctness_finding_ranks_above_a_high_time_finding_of_any_share():
    # eval_with_grad.py once put its host-side batches (PIT101) first, high on a busy machine,
    # and the evaluation in training mode (PIT803, results wrong) second
    ranked = settle([_f("PIT101", "high", share=0.4), _f("PIT803", "high", kind="correctness"),
                     _f("PIT605", "medium", share=0.2)])
    assert [f.code for f in ranked] == ["PIT803", "PIT101", "PIT605"]
    assert sorted(ranked, key=Finding.sort_key) == ranked  # the finding's own key agrees


def test_severity_still_comes_first_and_shares_order_the_rest():
    ranked = settle([_f("PIT902", "low", kind="correctness"), _f("PIT201", "medium", share=0.1),
                     _f("PIT101", "high", share=0.3), _f("PIT102", "high", share=0.5),
                     _f("PIT404", "high", kind="memory", share=0.6)])
    assert [f.code for f in ranked] == ["PIT404", "PIT102", "PIT101", "PIT201", "PIT902"]


def test_a_summary_stays_below_the_causes():
    ranked = settle([_f("PIT905", "high", share=0.9, summary=True), _f("PIT803", "high", kind="correctness"),
                     _f("PIT101", "medium", share=0.1)])
    assert [(f.code, f.severity) for f in ranked] == [("PIT803", "high"), ("PIT101", "medium"), ("PIT905", "low")]
