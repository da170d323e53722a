"""The capacity sweep's design (``dlfp.trials.sweep`` and ``design.kind: capacity``): SLO levels, rates
at a load and the bound, by hand; each arm's load and rate; the arms' SLO placeholders."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.trials import sweep
from dlfp.trials.config import parse_config
from dlfp.trials.design import DesignSpec, derive
from dlfp.trials.prediction import Measured, Workload, predict, workload_facts
from dlfp.trials.sweep import (
    LOADS,
    MIN_SPAN_S,
    SPAN_TTFT_SLOS,
    capacity_bound,
    min_span_s,
    rate_at_load,
    requests_at_load,
    resolution,
    slo_levels,
    sweep_record,
    top_requests,
)

M = Measured(decode_s=0.002, prefill_fixed_s=0.001, prefill_per_token_s=1e-5, decoders=4, source="test")
W = Workload(long_prompt=2000, short_prompt=100, short_output=100, long_output=20, stock_budget=4096)


def test_slo_levels_are_multiples_of_the_measured_decode_step_and_long_prefill() -> None:
    # Long prefill: one 2000-token step, 1 ms + 20 ms = 21 ms.
    assert slo_levels(M, W) == {"tight": {"itl_ms": 10.0, "ttft_ms": 63.0},
                                "relaxed": {"itl_ms": 50.0, "ttft_ms": 210.0}}


def test_the_rate_at_a_load_puts_stocks_predicted_prefill_load_there() -> None:
    # Per request: 0.2 x 21 ms + 0.8 x (1 ms + 1 ms) = 5.8 ms of prefill; load 0.58 -> 100 req/s.
    assert rate_at_load(M, W, 0.2, 0.58) == pytest.approx(100.0)
    p = predict(M, W, 100.0 * 0.2, 100.0 * 0.8, 0.005)
    assert p.stock_load == pytest.approx(0.58)
    with pytest.raises(ValueError, match="load"):
        rate_at_load(M, W, 0.2, 0.0)


def test_the_bound_is_the_rate_whose_prompts_fill_slo_sized_steps() -> None:
    # A 10 ms step carries (10 - 2 - 1) / 0.01 = 700 tokens: 70,000 tokens/s; mean prompt 0.2 x 2000 +
    # 0.8 x 100 = 480 tokens: 145.8 req/s.
    assert capacity_bound(M, W, 0.2, 0.010) == pytest.approx(70000 / 480)
    assert capacity_bound(M, W, 0.2, 0.002) == 0.0  # no step fits: nothing is sustainable


@given(st.floats(0.01, 0.5), st.floats(0.003, 1.0), st.floats(0.004, 1.0))
def test_the_bound_grows_with_the_slo(share: float, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    # monotone up to rounding: SLOs one ulp apart gave bounds two ulps the wrong way round
    assert capacity_bound(M, W, share, lo) <= capacity_bound(M, W, share, hi) * (1 + 1e-12)


def _raw(**design) -> dict:
    return parse_config({
        "design": {"kind": "capacity", "enforce": False, **design},
        "workload": {"classes": [
            {"name": "short", "weight": 0.8, "prompt_len": {"uniform": [50, 150]},
             "output_len": {"uniform": [50, 150]}},
            {"name": "long", "weight": 0.2, "prompt_len": {"uniform": [1500, 2500]},
             "output_len": {"uniform": [10, 30]}},
        ]},
        "arms": [{"name": "stock"}, {"name": "stock_0.29", "load": 0.29},
                 {"name": "dlfp.tight", "dlfp": {"itl_slo_ms": "@itl_slo_tight"}},
                 {"name": "dlfp.relaxed", "dlfp": {"itl_slo_ms": "@itl_slo_relaxed"}},
                 {"name": "cap", "dlfp": {"chunk_min": "@target_chunk", "chunk_max": "@target_chunk",
                                          "chunk_init": "@target_chunk"}}],
    }).raw


def test_a_capacity_design_sets_the_rate_slos_and_each_arms_slo_from_the_measurement() -> None:
    raw = _raw(load=0.58)
    d = derive(DesignSpec.parse(raw["design"]), M, workload_facts(raw), raw)
    assert d.kind == "capacity" and d.problems == ()
    record = sweep_record(M, workload_facts(raw), 0.2, 0.58)
    assert {k: v for k, v in d.sweep.items() if k != "arms"} == record
    # The top load's 100 requests would arrive in under MIN_SPAN_S: the trial gets as many as span it.
    n_top = top_requests(100, rate_at_load(M, workload_facts(raw), 0.2, LOADS[-1]), MIN_SPAN_S)
    assert n_top > 100 and d.overrides["workload"] == {"rate_rps": 100.0, "n_requests": n_top}
    assert d.overrides["slo"] == {"tpot_ms": 10.0, "ttft_ms": 63.0}
    arms = {a["name"]: a for a in d.overrides["arms"]}
    assert arms["dlfp.tight"]["dlfp"] == {"itl_slo_ms": 10.0}
    assert arms["dlfp.relaxed"]["dlfp"] == {"itl_slo_ms": 50.0}
    # The cap: the chunk of a step lasting T* = 0.5 x the tight SLO: (5 - 2 - 1) / 0.01 = 200 tokens.
    assert arms["cap"]["dlfp"]["chunk_max"] == 200
    # Every arm's rate: the design's load unless the arm names its own (half the load, half the rate).
    # Every point spans the same MIN_SPAN_S of arrivals: 400 requests at 100/s, 200 at 50/s.
    n, n_half = requests_at_load(0.58, n_top), requests_at_load(0.29, n_top)
    assert n == pytest.approx(MIN_SPAN_S * 100, abs=1) and n_half == pytest.approx(MIN_SPAN_S * 50, abs=1)
    assert d.sweep["arms"]["stock"] == {"load": 0.58, "rate_rps": 100.0, "n_requests": n}
    assert d.sweep["arms"]["stock_0.29"] == {"load": 0.29, "rate_rps": 50.0, "n_requests": n_half}
    assert arms["stock_0.29"]["rate_rps"] == 50.0 and arms["stock_0.29"]["n_requests"] == n_half
    assert "sweep" in d.record() and d.record()["sweep"]["bound_rps"]["tight"] == pytest.approx(146.0)


def test_an_arm_replays_its_trials_requests_at_its_own_rate() -> None:
    """The first of the same requests (lengths, tokens) at every load, their arrivals scaled by the rate
    ratio."""
    from dlfp.harness import workload

    raw = _raw(load=0.58)
    cfg = parse_config(raw).with_overrides(derive(DesignSpec.parse(raw["design"]), M, workload_facts(raw),
                                                  raw).overrides)
    trial = workload.generate(cfg.workload_spec(3))
    base, half = (workload.generate(cfg.workload_spec(3, arm)) for arm in ("stock", "stock_0.29"))
    assert len(trial) == cfg.workload["n_requests"] > len(base) > len(half) == round(len(base) / 2)
    k = len(half)
    assert [(r.request_id, r.prompt_token_ids, r.output_len) for r in trial[:k]] == \
        [(r.request_id, r.prompt_token_ids, r.output_len) for r in half]
    assert [r.arrival_s for r in half] == pytest.approx([2 * r.arrival_s for r in base[:k]])


def test_the_top_load_keeps_the_configs_requests_where_they_span_long_enough() -> None:
    assert top_requests(160, 10.0, MIN_SPAN_S) == 160  # 16 s of arrivals
    assert top_requests(160, 100.0, MIN_SPAN_S) == 400 == MIN_SPAN_S * 100  # 1.6 s: as many as span 4 s
    assert top_requests(160, 10.0, 20.0) == 200  # a longer span asked for: more requests
    assert requests_at_load(LOADS[-1], 160) == 160 and requests_at_load(LOADS[0], 160) >= 20


def test_a_point_spans_ten_ttft_slos_of_the_longest_level_or_the_minimum() -> None:
    assert min_span_s({"tight": {"ttft_ms": 63.0}, "relaxed": {"ttft_ms": 210.0}}) == MIN_SPAN_S  # 2.1 s < 4 s
    assert min_span_s({"tight": {"ttft_ms": 471.0}, "relaxed": {"ttft_ms": 1570.0}}) == pytest.approx(15.7)
    # Over 15.7 s, an overload of 10% adds 1.57 s of backlog: the relaxed SLO's worth; 3% at the tight one.
    assert resolution(1570.0, 15.7) == pytest.approx(1 / SPAN_TTFT_SLOS)
    assert resolution(471.0, 15.7) == pytest.approx(0.03)
    with pytest.raises(ValueError, match="span"):
        resolution(100.0, 0.0)


def test_a_slow_targets_design_gives_its_top_point_ten_relaxed_ttft_slos_of_arrivals() -> None:
    """The failure this guards against: on the modeled A100 with Qwen3-8B, 160 requests spanned 4.6 s
    beside a relaxed TTFT SLO of 1.57 s, and every arm passed at 1.2 times stock's prefill load."""
    slow = Measured(decode_s=0.02, prefill_fixed_s=0.001, prefill_per_token_s=1e-4, decoders=4, source="test")
    raw = _raw(load=0.58)
    d = derive(DesignSpec.parse(raw["design"]), slow, workload_facts(raw), raw)
    relaxed_s = d.sweep["slos"]["relaxed"]["ttft_ms"] / 1e3
    top = rate_at_load(slow, workload_facts(raw), 0.2, LOADS[-1])
    assert d.overrides["workload"]["n_requests"] / top >= SPAN_TTFT_SLOS * relaxed_s > MIN_SPAN_S
    assert all(resolution(d.sweep["slos"]["relaxed"]["ttft_ms"], a["n_requests"] / a["rate_rps"])
               <= 1 / SPAN_TTFT_SLOS + 0.01 for a in d.sweep["arms"].values())


def test_only_capacity_designs_take_a_load() -> None:
    with pytest.raises(ValueError, match="capacity designs"):
        DesignSpec.parse({"kind": "scaled", "load": 0.3})
    with pytest.raises(ValueError, match="capacity designs"):
        DesignSpec.parse({"kind": "capacity"})
    with pytest.raises(ValueError, match=r"design\.load"):
        DesignSpec.parse({"kind": "capacity", "load": 0})
    with pytest.raises(ValueError, match=r"arms\[1\].load"):
        parse_config({"arms": [{"name": "stock"}, {"name": "x", "load": 0.3}]})
    with pytest.raises(ValueError, match=r"arms\[1\].rate_rps"):
        parse_config({"arms": [{"name": "stock"}, {"name": "x", "rate_rps": -1}]})
    with pytest.raises(ValueError, match=r"arms\[1\].n_requests"):
        parse_config({"workload": {"n_requests": 10}, "arms": [{"name": "stock"}, {"name": "x", "n_requests": 11}]})


def test_the_design_sentence_follows_the_constants(monkeypatch) -> None:
    """The book prints it instead of typing the design into its prose: a changed constant changes it."""
    text = sweep.describe()
    assert f"{len(sweep.LOADS)} loads" in text and "tight: ITL 5 decode steps, TTFT 3 prefills" in text
    assert "10 TTFT SLOs" in text
    monkeypatch.setattr(sweep, "LOADS", (0.5, 1.0))
    monkeypatch.setitem(sweep.ITL_STEPS, "relaxed", 20.0)
    assert "2 loads, 0.5, 1 of" in sweep.describe() and "relaxed: ITL 20 decode steps" in sweep.describe()
