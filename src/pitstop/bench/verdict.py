"""Verdicts: does the measurement on this machine confirm the seed's claim? (torch-free)

The rule, exactly (``r`` = measured ratio of medians, ``[lo, hi]`` its 95% bootstrap
interval, resampling whole timing rounds so that a burst of load counts once
(``pitstop.stats.round_ratio_interval``), ``c`` = the claimed factor, ``m`` = 5% noise margin):

Speed-up claims (ratio = median time of the baseline / median time of the candidate):

1. any failed check (a fact the claim presupposes, e.g. "from_numpy shares memory") ->
   **refuted**;
2. ``lo > 1 + m`` (the whole interval is a gain of more than 5%): a clear win ->
   **confirmed** when the seed names no size, or when ``r >= 0.9 c`` (round claims like
   "2x" are met within 10%); a clear win smaller than that -> **not on this hardware**;
3. ``hi < 1 / (1 + m)`` (the whole interval is a loss of more than 5%): a clear loss ->
   **refuted**;
4. anything else is a tie or noise -> **not on this hardware**. A noisy tie is never
   confirmed: confirmation needs the interval's *low* end above 1.05.

Exact claims (deterministic quantities such as optimizer-state bytes per parameter byte):
every claimed value must match the measured one within 2% (absolute 0.02 near zero) ->
**confirmed**, else **refuted**. Noise does not apply: they are counted, not timed.

Scope (applied last, to both kinds): a claim made about GPUs (``Claim.scope == "gpu"``: the
seed's sentence is about GPUs, e.g. "to maximize the computation efficiency of GPU", or the
"3x" of 16-bit training on V100/2080Ti tensor cores) says nothing about a CPU, so on any
device other than ``cuda`` its verdict is capped at **not on this hardware**, whatever rules
1-4 gave (confirmed, refuted or a tie; a failed check included). The reason reads
"the claim is about GPUs; measured here on CPU: " followed by the reason rules 1-4 gave, so
the numbers are still shown. On ``cuda`` the rules apply unchanged. A claim with
``scope == "any"`` (the default) is judged by rules 1-4 on every device.

**Settled** (``settled``): the timing stops early once more samples could not change the
verdict: the interval lies wholly above ``1 + m`` (and wholly on one side of ``0.9 c`` when a
factor is claimed), wholly below ``1 / (1 + m)``, or wholly inside the tie band between them;
an exact claim, and a ``gpu`` claim off a GPU (capped whatever the numbers), are settled at once.

**skipped** (with the reason) is given by the runner when a benchmark cannot run here
(no GPU, torch.compile unavailable); the scope never changes a skip. **error** is given when
the benchmark itself raised (a failed correctness check, a bug): the claim was not measured,
and that is a fault to fix, not a property of the machine; ``pitstop bench`` exits 1 then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pitstop.stats import RatioInterval

__all__ = [
    "CONFIRMED",
    "NOT_HERE",
    "REFUTED",
    "SKIPPED",
    "ERROR",
    "VERDICTS",
    "CONFIDENCE",
    "NOISE_MARGIN",
    "CLAIM_TOLERANCE",
    "EXACT_TOLERANCE",
    "SCOPES",
    "GPU_DEVICES",
    "Verdict",
    "judge",
    "judge_speedup",
    "judge_exact",
    "judge_scope",
    "settled",
]

CONFIRMED = "confirmed"
NOT_HERE = "not on this hardware"
REFUTED = "refuted"
SKIPPED = "skipped"
ERROR = "error"
VERDICTS = (CONFIRMED, NOT_HERE, REFUTED, SKIPPED, ERROR)

#: Confidence of the bootstrap interval on the ratio of medians.
CONFIDENCE = 0.95
#: Differences smaller than this are a tie even when they are statistically resolved.
NOISE_MARGIN = 0.05
#: A clear win of at least (1 - this) x the claimed factor meets the claim.
CLAIM_TOLERANCE = 0.10
#: Relative tolerance of exact claims (absolute near zero).
EXACT_TOLERANCE = 0.02
#: What a claim is about: ``any`` device, or ``gpu`` only (capped elsewhere, see the rule).
SCOPES = ("any", "gpu")
#: The devices on which a ``gpu`` claim is judged by rules 1-4.
GPU_DEVICES = ("cuda",)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")


def _band(r: RatioInterval) -> str:
    return f"{r.confidence:.0%} interval {r.low:.2f}x-{r.high:.2f}x"


def judge_speedup(ratio: RatioInterval, claimed: float | None, *, margin: float = NOISE_MARGIN,
                  tolerance: float = CLAIM_TOLERANCE) -> Verdict:
    """Verdict for a timing ratio (> 1 = the candidate is faster) against a claimed factor
    (``None``: the seed claims only that the candidate is faster)."""
    r = ratio.ratio
    noisy = " The interval is wide: re-run without --quick or on a quieter machine." \
        if ratio.low > 0 and ratio.high / ratio.low > 2 else ""
    if ratio.low > 1 + margin:
        if claimed is None:
            return Verdict(CONFIRMED, f"{r:.2f}x faster ({_band(ratio)}): a clear gain, as claimed.")
        if r >= claimed * (1 - tolerance):
            return Verdict(CONFIRMED, f"{r:.2f}x faster ({_band(ratio)}): reaches the claimed {claimed:g}x.")
        return Verdict(NOT_HERE, f"{r:.2f}x faster ({_band(ratio)}): a real gain, but short of the "
                                 f"claimed {claimed:g}x on this hardware.{noisy}")
    if ratio.high < 1 / (1 + margin):
        return Verdict(REFUTED, f"{r:.2f}x: the candidate is clearly slower here ({_band(ratio)}).{noisy}")
    return Verdict(NOT_HERE, f"no clear difference: {r:.2f}x ({_band(ratio)}) is within noise or "
                             f"the {margin:.0%} margin of a tie.{noisy}")


def judge_exact(measured: Mapping[str, float], claimed: Mapping[str, float], *,
                tolerance: float = EXACT_TOLERANCE, unit: str = "") -> Verdict:
    """Verdict for deterministic values: every claimed value must match within tolerance."""
    missing = sorted(set(claimed) - set(measured))
    if missing:
        raise ValueError(f"no measurement for claimed value(s) {', '.join(missing)}")
    u = f" {unit}" if unit else ""
    parts, wrong = [], []
    for name, want in claimed.items():
        got = measured[name]
        ok = abs(got - want) <= tolerance * max(abs(want), 1.0)
        parts.append(f"{name} {got:.3g}{u} (claimed {want:g})")
        if not ok:
            wrong.append(name)
    listing = "; ".join(parts)
    if wrong:
        return Verdict(REFUTED, f"measured {listing}: {', '.join(wrong)} differ from the claim.")
    return Verdict(CONFIRMED, f"measured {listing}: as claimed.")


def judge_scope(verdict: Verdict, scope: str, device: str) -> Verdict:
    """Cap the verdict of a claim about GPUs measured on another device (the scope rule)."""
    if scope not in SCOPES:
        raise ValueError(f"claim scope {scope!r} is not one of {SCOPES}")
    if scope == "any" or device in GPU_DEVICES or verdict.verdict == SKIPPED:
        return verdict
    return Verdict(NOT_HERE, f"the claim is about GPUs; measured here on {device.upper()}: {verdict.reason} "
                             f"A {device.upper()} result neither confirms nor refutes a GPU claim: run it on a "
                             f"GPU (--device cuda).")


def judge(kind: str, claimed: float | None, ratio: RatioInterval, *, device: str, scope: str = "any",
          checks: Mapping[str, bool] | None = None, exact_values: Mapping[str, float] | None = None,
          exact_claims: Mapping[str, float] | None = None, unit: str = "") -> Verdict:
    """The full rule (module docstring): failed checks first, then exact or speed-up, then
    the claim's scope against the ``device`` measured on (``cpu``, ``cuda``)."""
    failed = [name for name, ok in (checks or {}).items() if not ok]
    if failed:
        verdict = Verdict(REFUTED, "failed check: " + "; ".join(failed) + ".")
    elif kind == "exact":
        verdict = judge_exact(exact_values or {}, exact_claims or {}, unit=unit)
    else:
        verdict = judge_speedup(ratio, claimed)
    return judge_scope(verdict, scope, device)


def settled(ratio: RatioInterval, claimed: float | None, *, device: str, scope: str = "any", kind: str = "speedup",
            margin: float = NOISE_MARGIN, tolerance: float = CLAIM_TOLERANCE) -> bool:
    """Whether the verdict of :func:`judge` is already decided by ``ratio`` (more samples only
    narrow the interval around its point, so an interval wholly on one side of every boundary of
    the rule cannot change sides). Used by the timing to stop a benchmark early."""
    if scope not in SCOPES:
        raise ValueError(f"claim scope {scope!r} is not one of {SCOPES}")
    if kind == "exact" or (scope == "gpu" and device not in GPU_DEVICES):
        return True
    up, down = 1 + margin, 1 / (1 + margin)
    if ratio.low > up:
        bar = None if claimed is None else claimed * (1 - tolerance)
        return bar is None or ratio.low >= bar or ratio.high < bar
    if ratio.high < down:
        return True
    return down < ratio.low and ratio.high < up
