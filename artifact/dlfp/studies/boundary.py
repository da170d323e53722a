"""Where DLFP's P99 ITL gain turns into a loss: the regime boundary from a stall-share sweep.

The sensitivity study (:mod:`dlfp.studies.plans`) runs stock and DLFP on one target at several
designed stall shares. Each run gives a paired reduction of P99 ITL with a Student's t interval,
plotted against the share of stock's inter-token gaps that were *measured* to be prefill stalls
(not the share the design aimed at: the measured one is what the pooled P99 sees). This module
classifies each point by its interval and states the boundary in words, so that the book's
sentence follows the runs rather than an expectation. Pure pandas over
:func:`dlfp.analysis.tables.generalization_table` rows.
"""

from __future__ import annotations

import pandas as pd

from dlfp.analysis.stats import direction

STALLS, LO, HI = "prefill stalls stock (% of gaps)", "ITL CI lo (%)", "ITL CI hi (%)"


def _shares(values: list[float]) -> str:
    return ", ".join(f"{v:.2g}%" for v in values)


def boundary(points: pd.DataFrame) -> str:
    """One target's sweep in words: where the gain is detectable, where no effect is, where a loss
    is, and between which measured stall shares the gain first becomes detectable."""
    if points.empty:
        return "no sweep runs"
    pts = points.sort_values(STALLS)
    kinds = [direction(lo, hi) for lo, hi in zip(pts[LO], pts[HI], strict=True)]
    at = {k: [float(s) for s, kk in zip(pts[STALLS], kinds, strict=True) if kk == k]
          for k in ("gain", "none", "loss", "untested")}
    parts = [f"{label} at {_shares(at[k])} of gaps" for k, label in (
        ("gain", "a detectable gain"), ("none", "no detectable effect"), ("loss", "a detectable loss"),
        ("untested", "one trial (no interval)")) if at[k]]
    if not at["gain"]:
        verdict = "DLFP shows no detectable gain anywhere in the sweep"
    elif not (at["none"] or at["loss"]):
        verdict = f"the gain holds at every point, down to {_shares([min(at['gain'])])}: no boundary inside the sweep"
    else:
        lowest_gain = min(at["gain"])
        below = [s for s in at["none"] + at["loss"] if s < lowest_gain]
        above = [s for s in at["none"] + at["loss"] if s > lowest_gain]
        verdict = (f"the gain becomes detectable between {_shares([max(below)])} and {_shares([lowest_gain])}"
                   if below else f"the gain is detectable at the lowest point, {_shares([lowest_gain])}")
        if above:
            verdict += f", but not at {_shares(above)} above it"
    if at["loss"]:
        verdict += f"; DLFP is detectably worse than stock at {_shares(at['loss'])}"
    return f"{'; '.join(parts)}. So {verdict}."
