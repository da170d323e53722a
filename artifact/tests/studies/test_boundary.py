"""The regime boundary from a stall-share sweep (``dlfp.studies.boundary``)."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from dlfp.studies.boundary import boundary, point_class


def _sweep(points: list[tuple[float, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(points, columns=["prefill stalls stock (% of gaps)", "ITL reduction (%)",
                                         "ITL CI lo (%)", "ITL CI hi (%)"])


def test_boundary_in_words() -> None:
    text = boundary(_sweep([(2.0, 40, 20, 60), (0.3, 5, -20, 30), (0.6, 10, -5, 25), (4.0, 50, 30, 70)]))
    assert "a detectable gain at 2%, 4% of gaps" in text and "no detectable effect at 0.3%, 0.6%" in text
    assert "the gain becomes detectable between 0.6% and 2%: none of the 2 points below shows it, all of the " \
           "2 points from there on do" in text
    assert "no boundary inside the sweep" in boundary(_sweep([(0.3, 40, 20, 60), (2.0, 50, 30, 70)]))
    worse = boundary(_sweep([(0.3, -40, -60, -20), (2.0, 5, -30, 40)]))
    assert "no detectable gain anywhere" in worse and "detectably worse than stock at 0.3%" in worse
    assert "one trial (no interval) at 1%" in boundary(_sweep([(1.0, 5, math.nan, math.nan)]))
    assert boundary(_sweep([])) == "no sweep runs"


@given(st.lists(st.tuples(st.floats(0.01, 50), st.floats(-100, 100), st.floats(0, 60), st.floats(0, 60)),
                min_size=1, max_size=8))
def test_boundary_names_every_point_once(raw: list[tuple[float, float, float, float]]) -> None:
    """Every sweep point appears in exactly one class, and the class follows its interval."""
    points = [(s, m, m - lo, m + hi) for s, m, lo, hi in raw]
    text = boundary(_sweep(points))
    kinds = [point_class(lo, hi) for _, _, lo, hi in points]
    for k, phrase in (("gain", "a detectable gain at"), ("none", "no detectable effect at"),
                      ("loss", "a detectable loss at")):
        assert (phrase in text) == (k in kinds)


def test_one_gain_among_points_without_one_names_no_boundary() -> None:
    """The reviewer's case: one detectable point of six, with a point above it that shows nothing,
    is not a boundary "between 3.3% and 3.8%"."""
    text = boundary(_sweep([(0.9, 5, -20, 30), (1.5, 5, -20, 30), (2.4, 5, -20, 30), (3.3, 5, -20, 30),
                            (3.8, 40, 5, 75), (6.1, 20, -10, 50)]))
    assert "no boundary established" in text and "between" not in text
    assert "detectable gains (1 point) and points without one (5 points) interleave" in text


@given(st.lists(st.tuples(st.floats(0.01, 50), st.sampled_from(["gain", "none", "loss"])), min_size=2, max_size=8,
                unique_by=lambda p: p[0]))
def test_a_named_boundary_splits_the_sweep_cleanly(raw: list[tuple[float, str]]) -> None:
    """Whenever the sentence names a boundary, every point below it lacks a gain and every point
    from it on has one; otherwise it names none."""
    ci = {"gain": (20.0, 60.0), "none": (-20.0, 30.0), "loss": (-60.0, -20.0)}
    text = boundary(_sweep([(s, 0.0, *ci[c]) for s, c in raw]))
    ordered = [c == "gain" for _, c in sorted(raw)]
    clean_split = any(ordered) and not all(ordered) and ordered == sorted(ordered)
    assert ("becomes detectable between" in text) == clean_split
