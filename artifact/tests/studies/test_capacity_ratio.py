"""Capacity ratios across trials (:mod:`dlfp.studies.capacity_ratio`): always a ratio (positive), the same
answer whichever arm is on top, censored trials as the bounds they are, and a catastrophic trial that makes
an arm easier to place below the best, never harder (the paired t test of differences did the opposite)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.studies.capacity_ratio import compare, family_confidence, log_ratio_interval, trial_bounds, trial_log_ratio
from tests.studies.capacity_trials import LOWEST, trial

caps = st.lists(st.floats(0.5, 50.0), min_size=2, max_size=8)


def points(values: list[float]) -> list[tuple[float, float]]:
    return [(v, v) for v in values]


@settings(max_examples=60, deadline=None)
@given(a=caps, spread=st.floats(0.0, 0.5), confidence=st.floats(0.5, 0.999))
def test_the_interval_is_a_positive_ratio_the_same_either_way_round(a: list[float], spread: float,
                                                                    confidence: float) -> None:
    b = [x * (1 + spread * (-1) ** i) for i, x in enumerate(a)]
    r = log_ratio_interval(points(a), points(b), confidence)
    back = log_ratio_interval(points(b), points(a), confidence)
    assert 0 < r.lo <= r.estimate <= r.hi < math.inf
    assert (r.lo, r.estimate, r.hi) == pytest.approx((1 / back.hi, 1 / back.estimate, 1 / back.lo))
    assert r.n == len(a) and r.censored == 0


def test_a_constant_ratio_is_its_own_interval_and_a_swinging_one_is_not() -> None:
    r = log_ratio_interval(points([2.0, 4.0, 6.0]), points([4.0, 8.0, 12.0]), 0.95)
    assert (r.estimate, r.lo, r.hi) == pytest.approx((0.5, 0.5, 0.5)) and r.below(1.0) and not r.at_least(0.5 + 1e-9)
    swing = log_ratio_interval(points([5.0, 3.0, 6.5]), points([4.0, 5.0, 6.0]), 0.95)
    assert swing.lo < 1 < swing.hi and not swing.below(1.0)
    one = log_ratio_interval(points([5.0]), points([4.0]), 0.95)
    assert math.isnan(one.lo) and one.words() == "1.25 (no interval)"  # one trial: no interval
    wide = log_ratio_interval(points([1.0, 300.0]), points([1.0, 1.0]), 0.95)
    assert wide.words() == "17.32 (0.00-9.46e+16)"  # a far end in three digits, not seventeen


def test_a_catastrophic_trial_places_an_arm_below_not_beside_the_best() -> None:
    """The issue's case: an arm whose trials sit a little under the best, then one trial fails at the lowest
    rate. As a zero in a t test of differences that trial widened the interval until the arm tied; as the
    bound it is (at most the lowest rate) it keeps the arm below."""
    best = [(10.0, 10.0), (11.0, 11.0), (9.0, 9.0)]
    near = [(8.0, 8.0), (8.5, 8.5), (7.5, 7.5)]
    crashed = [(8.0, 8.0), (8.5, 8.5), trial_bounds(0.0, "below", LOWEST)]
    assert log_ratio_interval(near, best, 0.95).below(1.0)
    r = log_ratio_interval(crashed, best, 0.95)
    assert r.below(1.0) and r.censored == 1 and math.isnan(r.estimate) and r.lo == 0.0
    assert r.hi < log_ratio_interval(near, best, 0.95).hi
    assert r.words().startswith("censored (0.00-")


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0.5, 20.0), min_size=2, max_size=6), bound=st.floats(0.01, 20.0),
       lower=st.floats(0.01, 1.0))
def test_a_lower_bound_on_a_failed_trial_never_raises_the_upper_end(values: list[float], bound: float,
                                                                      lower: float) -> None:
    """Monotone where a t test of differences was not: the lower a trial's bound (the earlier it failed),
    the lower the ratio's upper end."""
    ref = points([10.0] * (len(values) + 1))
    high = log_ratio_interval([*points(values), (0.0, bound)], ref, 0.95)
    low = log_ratio_interval([*points(values), (0.0, bound * lower)], ref, 0.95)
    assert low.hi <= high.hi * (1 + 1e-12) and low.lo == high.lo == 0.0


def test_censored_trials_bound_only_their_own_side() -> None:
    assert trial_bounds(3.0, "none", 3.0) == (3.0, 3.0)
    assert trial_bounds(0.0, "below", 0.5) == (0.0, 0.5)
    assert trial_bounds(6.0, "above", math.inf) == (6.0, math.inf)
    with pytest.raises(ValueError, match="above 0"):
        trial_bounds(0.0, "none", 0.0)
    with pytest.raises(ValueError, match="none, below or above"):
        trial_bounds(1.0, "mixed", 1.0)
    assert trial_log_ratio((6.0, math.inf), (6.0, math.inf)) == (-math.inf, math.inf)  # both met the top rate
    assert trial_log_ratio((0.0, 0.5), (4.0, 4.0)) == (-math.inf, pytest.approx(math.log(0.5 / 4.0)))
    above = [(6.0, math.inf), (6.0, math.inf), (5.0, 5.0), (4.5, 4.5)]
    top = log_ratio_interval(above, points([6.0, 5.0, 5.0, 4.0]), 0.95)
    assert top.hi == math.inf and 0 < top.lo < 1 and not top.below(1.0)  # met the top rate: never placed below
    bounds_only = log_ratio_interval([(6.0, math.inf)] * 3, points([6.0, 5.0, 4.0]), 0.95)
    assert math.isnan(bounds_only.hi) and not bounds_only.below(1.0)  # no value, no spread: no interval


def test_the_family_confidence_corrects_for_every_pair_judged() -> None:
    assert family_confidence(1) == pytest.approx(0.95) and family_confidence(14) == pytest.approx(1 - 0.05 / 14)
    wide = log_ratio_interval(points([9.0, 10.0, 11.5]), points([10.0, 10.0, 10.0]), family_confidence(14))
    narrow = log_ratio_interval(points([9.0, 10.0, 11.5]), points([10.0, 10.0, 10.0]), 0.95)
    assert wide.lo < narrow.lo and wide.hi > narrow.hi
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="positive number"):
            family_confidence(bad)


def test_compare_pairs_the_trials_two_arms_share() -> None:
    rows = [trial("t", "tight", "a", k, c) for k, c in enumerate([2.0, 4.0, 6.0, 9.0])]
    rows += [trial("t", "tight", "b", k, c) for k, c in enumerate([4.0, 8.0, 12.0])]
    r = compare(pd.DataFrame(rows), "a", "b", 0.95)
    assert r.n == 3 and r.estimate == pytest.approx(0.5)
