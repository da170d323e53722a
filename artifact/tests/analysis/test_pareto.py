"""The Pareto frontier of arms by P99 TTFT and ITL (``dlfp.analysis.pareto``): exactly the points no
other point dominates, one of equal points, none missing a number."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dlfp.analysis import pareto
from dlfp.analysis.pareto import ITL, TTFT


@st.composite
def _points(draw: st.DrawFn) -> pd.DataFrame:
    """Up to 12 (TTFT, ITL) points on a coarse grid (ties in either number, and equal points, are
    common), under index labels that may repeat (tables concatenated across runs)."""
    n = draw(st.integers(0, 12))
    grid = st.sampled_from([1.0, 2.0, 2.5, 3.0, 7.0])
    t = pd.DataFrame({TTFT: draw(st.lists(grid, min_size=n, max_size=n)),
                      ITL: draw(st.lists(grid, min_size=n, max_size=n)), "id": range(n)})
    return t.set_axis(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a != b


@given(_points())
@example(pd.DataFrame({TTFT: [1.0, 2.0], ITL: [1.0, 2.0], "id": [0, 1]}).set_axis([0, 0]))  # a fuzz find:
# under a repeated label, selecting kept rows by label returned the dominated point too
@settings(max_examples=200, deadline=None)  # a shared machine: timings vary
def test_the_frontier_is_the_pareto_set(points: pd.DataFrame) -> None:
    front = pareto.frontier(points)
    kept = list(zip(front[TTFT], front[ITL], strict=True))
    everyone = list(zip(points[TTFT], points[ITL], strict=True))
    assert front["id"].is_unique and set(front["id"]) <= set(points["id"])
    assert front[TTFT].is_monotonic_increasing and len(set(kept)) == len(kept)  # one of equal points
    assert not any(_dominates(q, p) for p in kept for q in everyone)
    dropped = points[~points["id"].isin(front["id"])]
    for q in zip(dropped[TTFT], dropped[ITL], strict=True):
        assert any(p[0] <= q[0] and p[1] <= q[1] for p in kept)  # weakly dominated by a kept point


def test_the_frontier_leaves_out_a_point_missing_a_number() -> None:
    points = pd.DataFrame({TTFT: [1.0, math.nan, 2.0], ITL: [5.0, 1.0, math.nan]})
    assert pareto.frontier(points)[TTFT].tolist() == [1.0]
