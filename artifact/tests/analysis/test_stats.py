"""Paired statistics: the paper's interval, validation, and interval properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlfp.analysis.stats import bootstrap_ci, paired_reduction, t_ci


def test_paired_reduction() -> None:
    assert paired_reduction(100.0, 75.0) == 25.0
    assert paired_reduction(80.0, 100.0) == -25.0  # DLFP slower: negative reduction
    with pytest.raises(ValueError, match=r"stock=0\.0 is invalid; allowed: finite number > 0"):
        paired_reduction(0.0, 1.0)
    with pytest.raises(ValueError, match=r"stock=-1\.0"):
        paired_reduction(-1.0, 1.0)
    with pytest.raises(ValueError, match="dlfp=nan"):
        paired_reduction(1.0, float("nan"))


def test_paper_interval() -> None:
    # The paper prints 27.7 [21.0, 34.3] from unrounded per-trial reductions.
    mean, lo, hi = t_ci([24.8, 30.1, 28.2])
    assert mean == pytest.approx(27.70, abs=1e-9)
    assert lo == pytest.approx(21.03, abs=0.01) and hi == pytest.approx(34.37, abs=0.01)


def test_t_ci_validation() -> None:
    with pytest.raises(ValueError, match=r"values has 1 element\(s\); allowed: .* n >= 2"):
        t_ci([1.0])
    with pytest.raises(ValueError, match=r"confidence=1.0 is invalid; allowed: \(0, 1\)"):
        t_ci([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="finite numbers"):
        t_ci([1.0, float("nan")])


def test_bootstrap_is_seeded_and_agrees_with_t_for_normal_data() -> None:
    x = np.random.default_rng(1).normal(10.0, 2.0, 200)
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    assert bootstrap_ci(x, seed=3) != bootstrap_ci(x, seed=4)
    mean, lo, hi = bootstrap_ci(x, n_resamples=4000)
    t_mean, t_lo, t_hi = t_ci(x)
    assert mean == t_mean
    assert lo == pytest.approx(t_lo, abs=0.1) and hi == pytest.approx(t_hi, abs=0.1)
    with pytest.raises(ValueError, match="n_resamples=0 is invalid"):
        bootstrap_ci(x, n_resamples=0)


samples = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=30)


@settings(max_examples=60, deadline=None)
@given(samples)
def test_t_ci_contains_mean_and_widens_with_confidence(x) -> None:
    eps = 1e-9
    m90, lo90, hi90 = t_ci(x, 0.90)
    m95, lo95, hi95 = t_ci(x, 0.95)
    assert m90 == m95 and lo95 - eps <= lo90 <= m90 <= hi90 <= hi95 + eps
    assume(np.std(x) > 1e-6)
    assert hi95 - lo95 > hi90 - lo90


@settings(max_examples=20, deadline=None)
@given(samples)
def test_bootstrap_ci_contains_mean(x) -> None:
    mean, lo, hi = bootstrap_ci(x, n_resamples=500)
    assert min(x) - 1e-9 <= lo <= mean + 1e-9 and mean - 1e-9 <= hi <= max(x) + 1e-9
