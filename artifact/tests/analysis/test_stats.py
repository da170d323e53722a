"""Paired statistics: the paper's interval, validation, and interval properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlfp.analysis.stats import (
    bootstrap_ci,
    effect_kind,
    effect_words,
    is_benefit,
    is_harm,
    paired,
    paired_reduction,
    t_ci,
)


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


@pytest.mark.parametrize(("lo", "hi", "kind"), [
    (10.5, 60, "large benefit"), (10.0, 60, "detectable benefit"), (0.1, 5, "detectable benefit"),
    (0.0, 5, "no detectable effect"), (-5, 0.0, "no detectable effect"), (-5, -0.1, "detectable harm"),
    (-60, -10.5, "large harm"), (math.nan, 5, "untested"), (75, 75, "large benefit")])
def test_effect_kind_follows_the_interval_only(lo: float, hi: float, kind: str) -> None:
    assert effect_kind(lo, hi) == kind


@given(st.floats(-100, 100), st.floats(0, 100), st.integers(2, 12))
def test_effect_words_never_claim_more_than_the_interval(mean: float, half: float, n: int) -> None:
    """A benefit or a harm is only ever worded when the interval excludes zero, and the size word
    (large) only when it excludes +-10%; two trials always say so."""
    p = {"mean_pct": mean, "t_lo": mean - half, "t_hi": mean + half, "n": n}
    words = effect_words(p)
    assert ("no detectable effect" in words) == (mean - half <= 0 <= mean + half)
    assert ("(a large " in words) == (mean - half > 10 or mean + half < -10)
    assert ("reduces it" in words) == (mean - half > 0)
    assert words.endswith(", on two trials only") == (n == 2)
    assert is_benefit(effect_kind(p["t_lo"], p["t_hi"])) == ("reduces it" in words)
    assert is_harm(effect_kind(p["t_lo"], p["t_hi"])) == ("raises it" in words)


def test_one_trial_is_not_judged() -> None:
    assert effect_words({"mean_pct": 40.0, "reductions_pct": [40.0]}) == "cannot be judged from one trial (no interval)"


def test_bootstrap_only_from_seven_trials() -> None:
    rows = pd.DataFrame([{"trial": k, "arm": arm, "m": 100.0 if arm == "stock" else 60.0 + k}
                         for k in range(7) for arm in ("stock", "dlfp")])
    assert "boot_lo" in paired(rows, "m") and "boot_lo" not in paired(rows[rows.trial < 6], "m")


def test_reduction_notes_read_a_table_row_in_its_intervals_words() -> None:
    from dlfp.analysis.stats import effect_words, reduction_notes

    assert reduction_notes(20.0, 3, 5.0, 35.0) == [
        effect_words({"mean_pct": 20.0, "n": 3, "t_lo": 5.0, "t_hi": 35.0}), "paired 95% CI 5.0% to 35.0%"]
    assert reduction_notes(20.0, 1, math.nan, math.nan) == ["cannot be judged from one trial (no interval)"]
    assert reduction_notes(-3.0, 3, -9.0, 2.5)[0] == "shows no detectable effect on it"
