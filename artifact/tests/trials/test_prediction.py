"""What a design predicts (``dlfp.trials.prediction``).

Stall share and loads by hand, the inverse for rates, and the workload facts a design reads.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.trials.prediction import (
    Measured,
    Workload,
    long_class_index,
    mean_length,
    predict,
    probe_sizes,
    scaled_rates,
)

CPU = Measured(decode_s=0.007, prefill_fixed_s=0.005, prefill_per_token_s=1e-4, decoders=4, source="test")


MIX = Workload(long_prompt=640, short_prompt=144, short_output=64, long_output=20, stock_budget=4096, max_prompt=4064)


def test_prediction_by_hand() -> None:
    # 1 long prompt/s of 640 tokens: stall = 7 + 5 + 64 = 76 ms, prefill 69 ms -> u = 0.069.
    p = predict(CPU, MIX, long_rate=1.0, short_rate=2.0, target_s=0.036)
    assert p.stall_s == pytest.approx(0.076)
    assert p.stall_share == pytest.approx(1.0 / ((1 - 0.069) / 0.007 + 1.0))
    short_s = 0.005 + 1e-4 * 144
    assert p.stock_load == pytest.approx(0.069 + 2 * short_s)
    # DLFP's 36 ms steps spend 12 ms on the decode step and the fixed cost: prefill takes 36/24 as long.
    assert p.dlfp_load == pytest.approx(0.069 * 1.5 + 2 * short_s)
    assert p.rate_rps == 3.0 and p.long_share == pytest.approx(1 / 3)


def test_budget_splits_a_long_prompt_into_several_stalls() -> None:
    small = replace(MIX, stock_budget=256)
    p = predict(CPU, small, 1.0, 0.0, 0.036)
    assert p.stall_steps == 3 and p.stall_s == pytest.approx(0.007 + 0.005 + 0.0256)


@settings(max_examples=200, deadline=None)
@given(d=st.floats(0.001, 0.05), a=st.floats(0.0, 0.02), b=st.floats(1e-6, 1e-3), n=st.floats(64, 8192),
       share=st.floats(0.015, 0.2))
def test_scaled_rates_hit_the_stall_share_they_aim_at(d, a, b, n, share) -> None:
    m = Measured(decode_s=d, prefill_fixed_s=a, prefill_per_token_s=b, decoders=4, source="h")
    w = Workload(long_prompt=n, short_prompt=100, short_output=64, long_output=16, stock_budget=4096)
    long_rate, short_rate = scaled_rates(m, w, share, 4.0)
    assert long_rate > 0 and short_rate >= 0
    p = predict(m, w, long_rate, short_rate, 1.0)
    assert p.stall_share == pytest.approx(share, rel=1e-9)


def test_long_class_is_the_one_with_the_longest_prompts_and_probes_fit_the_budget() -> None:
    classes = [{"name": "doc", "prompt_len": {"lognormal": {"median": 3000, "sigma": 0.3, "min": 100, "max": 8000}},
                "output_len": 8},
               {"name": "chat", "prompt_len": 64, "output_len": 64}]
    assert long_class_index(classes) == 0
    assert probe_sizes(MIX, 4) == (1016, 2032, 4064)  # the longest prompt the model length allows, in one step
    assert probe_sizes(replace(MIX, stock_budget=512), 4) == (127, 254, 508)
    assert probe_sizes(replace(MIX, max_prompt=1000), 4) == (250, 500, 1000)


def test_a_wide_lognormal_clips_to_its_max_without_overflow() -> None:
    """Fuzz find (CI seed): sigma 38 made exp(sigma^2 / 2) overflow in the design's workload facts."""
    from dlfp.harness.workload import LengthDist

    assert mean_length(LengthDist("lognormal", 8, 160, 64, 38)) == pytest.approx(84, abs=0.5)  # half on each bound
    assert mean_length(LengthDist("lognormal", 8, 160, 64, 0)) == pytest.approx(64.0)
