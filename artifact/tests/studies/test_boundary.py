"""The regime boundary from a stall-share sweep (``dlfp.studies.boundary``)."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from dlfp.studies.boundary import CLASSES, classified, point_class, regime_table


def _sweep(points: list[tuple[float, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(points, columns=["prefill stalls stock (% of gaps)", "ITL reduction (%)",
                                         "ITL CI lo (%)", "ITL CI hi (%)"])


def test_boundary_in_words() -> None:
    at, verdict = classified(_sweep([(2.0, 40, 20, 60), (0.3, 5, -20, 30), (0.6, 10, -5, 25), (4.0, 50, 30, 70)]))
    assert at == {"gain": [2.0, 4.0], "none": [0.3, 0.6], "loss": [], "untested": []}
    assert verdict == ("the gain becomes detectable between 0.6% and 2%: none of the 2 points below shows it, all "
                       "of the 2 points from there on do")
    assert "no boundary inside the sweep" in classified(_sweep([(0.3, 40, 20, 60), (2.0, 50, 30, 70)]))[1]
    at, worse = classified(_sweep([(0.3, -40, -60, -20), (2.0, 5, -30, 40)]))
    assert worse == ("DLFP shows no detectable gain anywhere in the sweep, though gains up to 40% are not ruled out "
                     "(the highest upper end of a point's 95% interval); DLFP is detectably worse than stock at 0.3%")
    assert at["loss"] == [0.3]
    assert classified(_sweep([(0.3, -40, -60, -20)]))[1] == ("DLFP shows no detectable gain anywhere in the sweep; "
                                                              "DLFP is detectably worse than stock at 0.3%")
    at, untested = classified(_sweep([(1.0, 5, math.nan, math.nan)]))
    assert at["untested"] == [1.0] and untested == "not tested: no point of the sweep has an interval (1 point)"
    assert classified(_sweep([]))[1] == "no sweep runs"


@given(st.lists(st.tuples(st.floats(0.01, 50), st.floats(-100, 100), st.floats(0, 60), st.floats(0, 60)),
                min_size=1, max_size=8))
def test_boundary_names_every_point_once(raw: list[tuple[float, float, float, float]]) -> None:
    """Every sweep point appears in exactly one class, and the class follows its interval."""
    points = [(s, m, m - lo, m + hi) for s, m, lo, hi in raw]
    at, _ = classified(_sweep(points))
    assert sorted(s for k, _ in CLASSES for s in at[k]) == sorted(s for s, *_ in points)
    for s, _, lo, hi in points:
        assert s in at[point_class(lo, hi)]


def test_one_gain_among_points_without_one_names_no_boundary() -> None:
    """The reviewer's case: one detectable point of six, with a point above it that shows nothing,
    is not a boundary "between 3.3% and 3.8%"."""
    _, verdict = classified(_sweep([(0.9, 5, -20, 30), (1.5, 5, -20, 30), (2.4, 5, -20, 30), (3.3, 5, -20, 30),
                                    (3.8, 40, 5, 75), (6.1, 20, -10, 50)]))
    assert "no boundary established" in verdict and "between" not in verdict
    assert "detectable gains (1 point) and points without one (5 points) interleave" in verdict


@given(st.lists(st.tuples(st.floats(0.01, 50), st.sampled_from(["gain", "none", "loss"])), min_size=2, max_size=8,
                unique_by=lambda p: p[0]))
def test_a_named_boundary_splits_the_sweep_cleanly(raw: list[tuple[float, str]]) -> None:
    """Whenever the verdict names a boundary, every point below it lacks a gain and every point
    from it on has one; otherwise it names none."""
    ci = {"gain": (20.0, 60.0), "none": (-20.0, 30.0), "loss": (-60.0, -20.0)}
    _, verdict = classified(_sweep([(s, 0.0, *ci[c]) for s, c in raw]))
    ordered = [c == "gain" for _, c in sorted(raw)]
    clean_split = any(ordered) and not all(ordered) and ordered == sorted(ordered)
    assert ("becomes detectable between" in verdict) == clean_split


def test_the_regime_table_has_a_row_per_sweep_and_a_column_per_class_some_sweep_has() -> None:
    cpu = _sweep([(0.34, 5, -20, 30), (4.8, 40, 20, 60)]).assign(source="measured: a CPU")
    sim = _sweep([(1.6, 5, -20, 30), (3.8, 40, 5, 75), (6.1, 20, -10, 50)]).assign(source="simulated: a profile")
    table = regime_table({"cpu-tiny": cpu, "a100": sim}, {"cpu-tiny": [0.25, 4.0], "a100": [0.25, 8.0]})
    assert list(table.columns) == ["sweep", "runs", "stall share designed (%)", "measured (%)",
                                   "a detectable gain at (%)", "no detectable effect at (%)", "boundary"]
    assert table.iloc[0].to_dict() == {
        "sweep": "cpu-tiny (measured)", "runs": 2, "stall share designed (%)": "0.25-4", "measured (%)": "0.34-4.8",
        "a detectable gain at (%)": "4.8", "no detectable effect at (%)": "0.34",
        "boundary": "the gain becomes detectable between 0.34% and 4.8%: none of the 1 point below shows it, "
                    "all of the 1 point from there on do"}
    assert table.iloc[1]["no detectable effect at (%)"] == "1.6, 6.1"
    assert table.iloc[1]["boundary"].startswith("no boundary established")
