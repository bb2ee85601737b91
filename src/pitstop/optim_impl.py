"""Which implementation a ``torch.optim`` constructor runs: for-loop, foreach or fused (torch-free).

Facts about torch.optim's keywords, read from a call's literal arguments (the lint rule of
PIT501 uses them to say what a ``foreach=False`` / ``fused=False`` really does);
``tests/test_lint_pit501.py`` checks the table against the installed torch.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTATION_KWARGS", "FOR_LOOP_BY_DEFAULT", "UNKNOWN", "implementation"]

#: The implementation switches each torch.optim constructor takes (torch 2.13). A keyword a
#: class does not take raises TypeError. tests/test_lint_pit501.py checks this table against
#: the installed torch, and the implementation predicted below against what really runs.
IMPLEMENTATION_KWARGS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("Adagrad", "Adam", "AdamW", "SGD"), frozenset({"foreach", "fused"})),
    **dict.fromkeys(("ASGD", "Adadelta", "Adafactor", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop"),
                    frozenset({"foreach"})),
    **dict.fromkeys(("LBFGS", "Muon", "SparseAdam"), frozenset()),
}
#: Classes whose default is the for-loop even on CUDA (Adafactor: to save the memory foreach needs).
FOR_LOOP_BY_DEFAULT = frozenset({"Adafactor"})
UNKNOWN = object()  # a keyword given, but not as a literal True/False/None


def implementation(cls: str, foreach=None, fused=None) -> str | None:
    """What ``torch.optim.<cls>(..., foreach=foreach, fused=fused)`` runs: ``"for-loop"``,
    ``"foreach"``, ``"fused"``, ``"default"`` (neither given: PyTorch picks foreach when every
    parameter is on an accelerator such as CUDA, else the for-loop; a class in
    ``FOR_LOOP_BY_DEFAULT`` always runs the for-loop then), ``"TypeError"`` (a keyword
    the class does not take), ``"RuntimeError"`` (both True); None when it depends on a
    non-literal value or the class is unknown. ``None`` means absent or ``=None``.

    PyTorch picks a default only when *neither* keyword is given: an explicit
    ``fused=False`` alone also turns foreach off (torch/optim/adam.py: "Respect when the user
    inputs False/True for foreach or fused")."""
    takes = IMPLEMENTATION_KWARGS.get(cls)
    if takes is None:
        return None
    if (foreach is not None and "foreach" not in takes) or (fused is not None and "fused" not in takes):
        return "TypeError"
    if fused is True and foreach is True:
        return "RuntimeError"
    if fused is True:
        return "fused"
    if foreach is True:
        return "foreach"
    if UNKNOWN in (foreach, fused):
        return None
    return "default" if foreach is None and fused is None and cls not in FOR_LOOP_BY_DEFAULT else "for-loop"
