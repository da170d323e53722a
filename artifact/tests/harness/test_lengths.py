"""Length distributions (:mod:`dlfp.harness.lengths`): a lognormal given by median and P90 or mean
is the one with the implied sigma; draws respect their bounds, report what clipping moved, keep
the configured median; the clipped mean is the draws' mean; the draw path is the one committed
workloads were generated with."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtri

from dlfp.harness.lengths import Z90, LengthDist


def lognormal(**arg: float) -> LengthDist:
    return LengthDist.parse({"lognormal": arg}, "prompt_len")


def test_z90_is_the_normal_quantile() -> None:
    assert math.isclose(Z90, float(ndtri(0.9)), rel_tol=1e-12)


def test_p90_and_mean_spellings_give_the_implied_sigma() -> None:
    by_p90 = lognormal(median=1730, p90=5696, min=16, max=8192)
    assert by_p90.sigma == pytest.approx(math.log(5696 / 1730) / Z90)
    assert by_p90 == lognormal(median=1730, sigma=by_p90.sigma, min=16, max=8192)
    by_mean = lognormal(median=100, mean=100 * math.exp(0.5), min=1, max=10_000)  # sigma 1: mean = median e^(1/2)
    assert by_mean.sigma == pytest.approx(1.0)
    assert lognormal(median=50, p90=50, min=1, max=99).sigma == 0.0  # p90 == median: no spread


def test_the_draw_path_is_the_committed_one() -> None:
    """The formula every committed lognormal workload was drawn with, call for call."""
    dist = lognormal(median=64, sigma=0.5, min=8, max=160)
    legacy = np.clip(np.rint(np.random.default_rng(3).lognormal(math.log(64), 0.5, size=500)), 8, 160)
    assert np.array_equal(dist.sample(np.random.default_rng(3), 500), legacy.astype(np.int64))
    uniform = LengthDist("uniform", 3, 9)
    assert np.array_equal(uniform.sample(np.random.default_rng(1), 50),
                          np.random.default_rng(1).integers(3, 10, size=50, dtype=np.int64))


@pytest.mark.parametrize(("arg", "message"), [
    ({"median": 5, "min": 1, "max": 9}, r"exactly one of \['sigma', 'p90', 'mean'\] beside 'median', got \[\]"),
    ({"median": 5, "sigma": 1, "p90": 9, "min": 1, "max": 9}, r"got \['sigma', 'p90'\]"),
    ({"median": 50, "p90": 40, "min": 1, "max": 99},
     r"prompt_len: p90=40 is invalid; allowed: finite number >= median \(50\)"),
    ({"median": 50, "mean": float("inf"), "min": 1, "max": 99}, r"prompt_len: mean=inf is invalid"),
    ({"median": 50, "p90": "90", "min": 1, "max": 99}, r"p90='90' is invalid"),
    ({"median": 500, "p90": 900, "min": 1, "max": 99}, r"median=500 is invalid; allowed: number in \[min, max\]"),
    ({"median": 5, "p90": 9, "min": 0, "max": 9}, r"min=0 is invalid"),
    ({"median": 5, "p95": 9, "min": 1, "max": 9}, r"lognormal: unknown key\(s\) \['p95'\]"),
])
def test_bad_lognormals_are_refused_naming_the_field(arg, message) -> None:
    with pytest.raises(ValueError, match=message):
        lognormal(**arg)


@settings(max_examples=40, deadline=None)
@given(median=st.integers(20, 5000), sigma=st.floats(0.05, 2.0), lo_frac=st.floats(0.05, 0.9),
       hi_mult=st.floats(1.1, 20.0), seed=st.integers(0, 2**32))
def test_lognormal_draws_respect_clipping_and_keep_the_median(median, sigma, lo_frac, hi_mult, seed) -> None:
    lo, hi = max(1, int(median * lo_frac)), int(median * hi_mult)
    dist = LengthDist("lognormal", lo, hi, median, sigma)
    x, raised, lowered = dist.draw(np.random.default_rng(seed), 4000)
    assert x.dtype == np.int64 and lo <= x.min() and x.max() <= hi
    assert (x[raised] == lo).all() and (x[lowered] == hi).all() and not (raised & lowered).any()
    # The sample median of 4000 draws: sd ~ 1.25 sigma median / sqrt(4000) ~ 4 % at sigma 2; 15 % is > 3 sd.
    assert np.median(x) == pytest.approx(median, rel=0.15, abs=1)
    expected_low = 0.5 * math.erfc(-(math.log(lo - 0.5) - math.log(median)) / (sigma * math.sqrt(2)))
    assert raised.mean() == pytest.approx(expected_low, abs=0.03)  # P(rint(X) < lo) = P(X < lo - 1/2)
    expected_high = 0.5 * math.erfc((math.log(hi + 0.5) - math.log(median)) / (sigma * math.sqrt(2)))
    assert lowered.mean() == pytest.approx(expected_high, abs=0.03)


@pytest.mark.parametrize("dist", [
    LengthDist("lognormal", 16, 8192, 1730, 0.93),
    LengthDist("lognormal", 1024, 16384, 7059, 0.48),
    LengthDist("lognormal", 8, 160, 64, 38.0),  # half the draws on each bound
    LengthDist("lognormal", 1, 1 << 20, 1000, 3.0),
    LengthDist("uniform", 8192, 32768),
    LengthDist("fixed", 7, 7),
], ids=["chat", "summarization", "wide", "very-heavy", "uniform", "fixed"])
def test_mean_length_is_the_mean_of_the_clipped_draws(dist) -> None:
    x = dist.sample(np.random.default_rng(0), 400_000)
    sd = x.std() / math.sqrt(x.size)
    assert dist.mean_length() == pytest.approx(x.mean(), abs=5 * sd + 0.5)


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(1, 1000), span=st.integers(0, 10**6), median_at=st.floats(0, 1),
       sigma=st.floats(0, 1e6) | st.sampled_from([0.0, 1e-12, 38.0, 1e300]))
def test_mean_length_is_finite_and_inside_the_bounds(lo, span, median_at, sigma) -> None:
    hi = min(lo + span, 1 << 20)
    dist = LengthDist("lognormal", lo, hi, lo + median_at * (hi - lo), sigma)
    mean = dist.mean_length()
    assert math.isfinite(mean) and lo <= mean <= hi
    assert dist.median_length() == dist.median


def test_medians_of_uniform_and_fixed_are_their_midpoints() -> None:
    assert LengthDist("uniform", 8192, 32768).median_length() == 20480
    assert LengthDist("fixed", 7, 7).median_length() == LengthDist("fixed", 7, 7).mean_length() == 7
