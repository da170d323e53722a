"""Where DLFP's P99 ITL gain turns into a loss: the regime boundary from a stall-share sweep.

The sensitivity study (:mod:`dlfp.studies.plans`) runs stock and DLFP on one target at several
designed stall shares. Each run gives a paired reduction of P99 ITL with a Student's t interval,
plotted against the share of stock's inter-token gaps that were *measured* to be prefill stalls
(not the share the design aimed at: the measured one is what the pooled P99 sees). This module
classifies each point by its interval (:func:`dlfp.analysis.stats.effect_kind`) and states the
boundary in words, so that the book's table follows the runs rather than an expectation. A
boundary is named only where the sweep splits cleanly: every point below it without a detectable
gain, every point from it on with one, and the count on each side said; a sweep whose gains and
non-gains interleave establishes no boundary, however suggestive one pair of neighbours looks. Pure pandas over
:func:`dlfp.analysis.tables.generalization_table` rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dlfp.analysis.labels import source_kind
from dlfp.analysis.stats import effect_kind, is_benefit, is_harm

STALLS, LO, HI = "prefill stalls stock (% of gaps)", "ITL CI lo (%)", "ITL CI hi (%)"
CLASSES = (("gain", "a detectable gain"), ("none", "no detectable effect"), ("loss", "a detectable loss"),
           ("untested", "one trial (no interval)"))
"""A point's class, and how the table names it."""


def _shares(values: list[float], unit: str = "%") -> str:
    return ", ".join(f"{v:.2g}{unit}" for v in values)


def point_class(lo: float, hi: float) -> str:
    """One sweep point's class from its interval: gain, none, loss or untested."""
    kind = effect_kind(lo, hi)
    return "gain" if is_benefit(kind) else "loss" if is_harm(kind) else "untested" if kind == "untested" else "none"


def _points(n: int) -> str:
    return f"{n} point" + ("" if n == 1 else "s")


def classified(points: pd.DataFrame) -> tuple[dict[str, list[float]], str]:
    """One target's sweep: the stall shares of each class (:data:`CLASSES`, every point in exactly
    one), and the verdict in words: whether the sweep establishes a stall share below which the gain
    is not detectable, and where DLFP is detectably worse than stock."""
    if points.empty:
        return {k: [] for k, _ in CLASSES}, "no sweep runs"
    pts = points.sort_values(STALLS)
    shares = [float(s) for s in pts[STALLS]]
    classes = [point_class(lo, hi) for lo, hi in zip(pts[LO], pts[HI], strict=True)]
    at = {k: [s for s, c in zip(shares, classes, strict=True) if c == k] for k, _ in CLASSES}
    tested = [(s, c) for s, c in zip(shares, classes, strict=True) if c != "untested"]
    gains = [c == "gain" for _, c in tested]
    if not tested:
        return at, f"not tested: no point of the sweep has an interval ({_points(len(shares))})"
    if not any(gains):
        highest = float(pts.loc[[c != "untested" for c in classes], HI].max())
        verdict = ("DLFP shows no detectable gain anywhere in the sweep" + (
            f", though gains up to {highest:.0f}% are not ruled out (the highest upper end of a point's 95% interval)"
            if highest > 0 else ""))
    elif all(gains):
        verdict = (f"the gain is detectable at all {_points(len(gains))}, down to {_shares([tested[0][0]])}: "
                   "no boundary inside the sweep")
    elif gains == sorted(gains):  # False before True: one clean split
        split = gains.index(True)
        verdict = (f"the gain becomes detectable between {_shares([tested[split - 1][0]])} and "
                   f"{_shares([tested[split][0]])}: none of the {_points(split)} below shows it, all of the "
                   f"{_points(len(gains) - split)} from there on do")
    else:
        verdict = (f"no boundary established: detectable gains ({_points(sum(gains))}) and points without one "
                   f"({_points(len(gains) - sum(gains))}) interleave along the stall share")
    if at["loss"]:
        verdict += f"; DLFP is detectably worse than stock at {_shares(at['loss'])}"
    return at, verdict


def regime_table(sweeps: Mapping[str, pd.DataFrame], aimed: Mapping[str, list[float]]) -> pd.DataFrame:
    """One row per target's sweep (rows of :func:`dlfp.analysis.tables.generalization_table`, with their
    ``source``): the runs, the stall shares the design aimed at (``aimed``, %) and those measured, the
    shares of each class, and the verdict. A table, not a sentence per sweep: those held some twenty
    numbers between them."""
    rows = []
    for target, points in sweeps.items():
        at, verdict = classified(points)
        lo, hi = min(aimed[target]), max(aimed[target])
        rows.append({
            "sweep": f"{target} ({source_kind(points.source.iloc[0])})", "runs": len(points),
            "stall share designed (%)": f"{lo:.2g}-{hi:.2g}",
            "measured (%)": f"{points[STALLS].min():.2g}-{points[STALLS].max():.2g}",
            **{f"{label} at (%)": _shares(at[k], "") for k, label in CLASSES},
            "boundary": verdict,
        })
    table = pd.DataFrame(rows)
    return table.loc[:, (table != "").any()]  # a class no sweep has gets no column
