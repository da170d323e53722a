"""Each trial's stock steps against the pre-flight's (:mod:`dlfp.trials.costcheck`), on hand-made step
records whose answer is known: an engine that runs ``f`` times slower shows ratios of ``f`` whatever
else the trial's steps hold (other batch sizes, prompts outside the probes' range), too few like steps
judge nothing, and a ratio is flagged exactly when it leaves the tolerance."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.trials.costcheck import MIN_DECODE_STEPS, MIN_MIXED_STEPS, CostDrift, drift, preflight_curve
from tests.trials.test_preflight import SIZES, Steps, engine

D, A, B = 0.008, 0.002, 1e-4


def trial(f: float, decoders: int = 4, mixed: int = MIN_MIXED_STEPS, decode: int = MIN_DECODE_STEPS) -> pd.DataFrame:
    """A stock unit's steps on the pre-flight's engine slowed by ``f``: like steps (up to twice ``decoders``
    decoding, prompts within the probes' range) and steps the check must ignore (a bigger batch, the
    decode step just after a prefill, a tiny prompt, a prompt beyond the largest probe)."""
    s = Steps().add(5 * D, decodes=3 * decoders, n=30)  # a batch beyond twice the pre-flight's: another step
    s.add(f * D, decodes=decoders, n=decode + 1)  # the first follows a big-batch step: not counted
    for i in range(mixed):
        n = SIZES[0] // 2 + (i * 97) % (SIZES[-1] - SIZES[0] // 2)
        s.add(f * (D + A + B * n), prefill=n, decodes=decoders).add(7 * D, decodes=1)
    s.add(9 * D, prefill=8, decodes=decoders).add(9 * D, prefill=10 * SIZES[-1], decodes=decoders)
    return s.frame()


def test_the_curve_is_the_decode_step_then_each_probe_sizes_median() -> None:
    curve = preflight_curve(engine(D, A, B).frame(), 4)
    assert curve[:, 0].tolist() == [0.0, *map(float, SIZES)]
    assert curve[:, 1] == pytest.approx([D, *(D + A + B * n for n in SIZES)])


@settings(max_examples=40, deadline=None)
@given(f=st.floats(0.2, 5.0), decoders=st.integers(2, 6))
def test_an_engine_slowed_by_f_shows_ratios_of_f(f: float, decoders: int) -> None:
    pre = engine(D, A, B, decoders=decoders).frame()
    d = drift(pre, trial(f, decoders), decoders)
    assert d.decode_steps == MIN_DECODE_STEPS and d.mixed_steps == MIN_MIXED_STEPS
    assert d.decode_ratio == pytest.approx(f) and d.mixed_ratio == pytest.approx(f, rel=0.05)


def test_too_few_like_steps_judge_nothing() -> None:
    pre = engine(D, A, B).frame()
    d = drift(pre, trial(3.0, mixed=MIN_MIXED_STEPS - 1, decode=MIN_DECODE_STEPS - 1), 4)
    assert math.isnan(d.decode_ratio) and math.isnan(d.mixed_ratio) and d.off_by(1.5) == []


@given(ratio=st.floats(0.05, 20.0), tolerance=st.floats(1.01, 4.0))
def test_a_ratio_is_flagged_exactly_when_it_leaves_the_tolerance(ratio: float, tolerance: float) -> None:
    off = CostDrift(ratio, 100, math.nan, 0).off_by(tolerance)
    assert bool(off) == (not 1 / tolerance <= ratio <= tolerance)
    assert all(f"{ratio:.2f}x the pre-flight's (median of 100)" in words for words in off)
