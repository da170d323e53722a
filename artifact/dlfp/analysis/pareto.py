"""The Pareto frontier of arms by P99 TTFT and P99 ITL: the points no other point beats in both.

Shared by the baselines study's regret (:mod:`dlfp.studies.frontier`) and the frontier figure
(:func:`dlfp.analysis.figures.frontier`), on :func:`dlfp.analysis.tables.arms_table` rows.
"""

from __future__ import annotations

import math

import pandas as pd

ITL, TTFT = "P99 ITL (ms)", "P99 TTFT (ms)"
"""The arms table's columns the frontier is drawn in."""


def frontier(points: pd.DataFrame) -> pd.DataFrame:
    """The Pareto-efficient points, by TTFT: those no other point dominates (no larger TTFT and no
    larger ITL, one of them smaller). Of points equal in both, the first is kept: a duplicate adds
    nothing to the line. Each kept point is picked by position, so repeated index labels (tables
    concatenated across runs) do not duplicate rows; a point missing either number is on no frontier."""
    ordered = points.dropna(subset=[TTFT, ITL]).sort_values([TTFT, ITL], kind="stable")
    best, keep = math.inf, []
    for pos, itl in enumerate(ordered[ITL]):
        if itl < best:  # strictly: at equal ITL the earlier (no slower) point dominates this one
            keep.append(pos)
            best = itl
    return ordered.iloc[keep]
