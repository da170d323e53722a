"""What the paper reports, in one table: every number the book quotes from the paper is read here.

The abstract's numbers (``../shared/paper/dlfp-abstract.txt``): three paired 100-request trials
on Qwen3-0.6B in BF16 on one A100 80 GB. They are shown beside ours, labelled *reported by the
paper*, and never mixed into our statistics; the claims file's ``ci_overlaps`` range for the GPU
row is the same interval (``artifact/tests/analysis/test_paper.py`` checks that the two agree).
"""

from __future__ import annotations

from typing import Any

PAPER: dict[str, Any] = {
    "setting": "Qwen3-0.6B BF16, one A100 80 GB",
    "trials": 3,
    "requests": 100,
    "itl_reduction_pct": (24.8, 30.1, 28.2),
    "mean_pct": 27.7,
    "ci_pct": (21.0, 34.3),
    "ttft_increase_pct": 34.8,
}
"""The paper's reported values; ``ci_pct`` is its paired 95% CI of the P99 ITL reduction as printed."""


def reported_itl() -> dict[str, Any]:
    """The paper's P99 ITL result shaped like :func:`dlfp.analysis.stats.paired`'s mapping (its
    printed interval, not one recomputed from its rounded per-trial values), so the same effect
    words describe ours and theirs."""
    lo, hi = PAPER["ci_pct"]
    return {"mean_pct": PAPER["mean_pct"], "t_lo": lo, "t_hi": hi, "reductions_pct": list(PAPER["itl_reduction_pct"])}


def percents(values: tuple[float, ...] | list[float]) -> str:
    """``(24.8, 30.1, 28.2)`` -> "24.8%, 30.1% and 28.2%", as prose lists them."""
    words = [f"{v:.1f}%" for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" and {words[-1]}"
