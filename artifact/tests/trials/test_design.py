"""The design rules: derived load and targets, predictions by hand, refusals that name the numbers."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control.fields import declared
from dlfp.trials.config import parse_config
from dlfp.trials.design import BIG, RULE_DOCS, DesignError, DesignSpec, Rules, derive, refuse
from dlfp.trials.prediction import (
    Measured,
    Workload,
    workload_facts,
)
from dlfp.trials.preflight import fit

CPU = Measured(decode_s=0.007, prefill_fixed_s=0.005, prefill_per_token_s=1e-4, decoders=4, source="test")


MIX = Workload(long_prompt=640, short_prompt=144, short_output=64, long_output=20, stock_budget=4096, max_prompt=4064)


def _config(long: list[int], **design) -> dict:
    return parse_config({"design": {"kind": "scaled", **design}, "workload": {"classes": [
        {"name": "short", "weight": 0.75, "prompt_len": {"uniform": [32, 256]}, "output_len": {"uniform": [32, 96]}},
        {"name": "long", "weight": 0.25, "prompt_len": {"uniform": long}, "output_len": {"uniform": [8, 32]}}]}}).raw


def test_scaled_design_derives_rate_shares_target_and_slos() -> None:
    raw = _config([512, 768])
    spec, facts = DesignSpec.parse(raw["design"]), workload_facts(raw)
    assert facts == MIX
    d = derive(spec, CPU, facts, raw)
    assert d.problems == ()
    # T* = 3 x (7 + 5) ms = 36 ms; itl_slo_ms = T* / 0.5.
    assert d.overrides["dlfp"] == {"itl_slo_ms": 72.0}
    # Stock's stall for a 640-token prompt (76 ms) is short of 3 T* = 108 ms: the long prompts are
    # lengthened 1.5 x, to a 960-token median, whose stall is 7 + 5 + 96 = 108 ms.
    assert d.overrides["workload"]["classes"][1]["prompt_len"] == {"uniform": [768, 1152]}
    assert d.prediction.stall_s == pytest.approx(0.108)
    assert d.overrides["slo"] == {"tpot_ms": 72.0, "ttft_ms": 1080.0}
    weights = [c["weight"] for c in d.overrides["workload"]["classes"]]
    assert sum(weights) == pytest.approx(1, abs=2e-3) and weights[1] == pytest.approx(d.prediction.long_share, 1e-2)
    assert d.prediction.stall_share == pytest.approx(0.03, rel=0.02)  # after rounding the rate
    cfg = parse_config(raw).with_overrides(d.overrides)
    assert cfg.workload["rate_rps"] == d.overrides["workload"]["rate_rps"] and cfg.tpot_slo_s == 0.072
    record = d.record()
    assert record["rules_version"] >= 1 and record["measured"]["decode_s"] == 0.007


def test_fixed_design_keeps_the_config_and_is_checked() -> None:
    raw = parse_config({"design": {"kind": "fixed"}}).raw  # CPU defaults: 4 req/s, itl_slo_ms 100
    d = derive(DesignSpec.parse(raw["design"]), CPU, workload_facts(raw), raw)
    assert d.overrides == {}
    assert d.prediction.rate_rps == pytest.approx(4.0) and d.prediction.target_s == pytest.approx(0.05)


def test_refusals_name_their_numbers() -> None:
    # A machine whose decode step is tiny next to the prefill: stalls would need more load than fits.
    slow_prefill = Measured(decode_s=0.002, prefill_fixed_s=0.0, prefill_per_token_s=1e-3, decoders=4, source="t")
    raw = _config([3000, 4000])
    d = derive(DesignSpec.parse(raw["design"]), slow_prefill, workload_facts(raw), raw)
    assert any("capacity" in p for p in d.problems)
    with pytest.raises(DesignError, match=r"prefilling \d+% of the time") as err:
        refuse(d)
    assert "design.enforce: false" in str(err.value) and "decode step 2.00 ms" in str(err.value)
    # A fixed design at a low rate: stalls too rare for a pooled P99, and a target above the stall.
    raw = parse_config({"design": {"kind": "fixed"}, "workload": {"rate_rps": 0.2}, "dlfp": {"itl_slo_ms": 400}}).raw
    d = derive(DesignSpec.parse(raw["design"]), CPU, workload_facts(raw), raw)
    assert any("coin toss" in p for p in d.problems) and any("nothing to cut" in p for p in d.problems)


@pytest.mark.parametrize(("raw", "needle"), [
    ({"kind": "relative"}, "design.kind"),
    ({"enforce": "yes"}, "design.enforce"),
    ({"stall_share": 2}, "design.stall_share"),
    ({"stall_share": 0.001}, "min_stall_share"),
    ({"target_overheads": 1}, "design.target_overheads"),
    ({"decoders": -1}, "design.decoders"),
    ({"stal_share": 0.1}, "unknown design setting"),
])
def test_bad_design_settings_are_refused_by_name(raw, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_config({"design": raw})


def test_preflight_fit_recovers_a_known_engine() -> None:
    # Decode steps of 7 ms; a probe of n tokens adds 5 ms + 0.1 ms/token; cadence = step duration.
    rows, t = [], 0.0
    for step, n in enumerate([0] * 10 + [160, 0, 0, 160, 0, 0, 320, 0, 0, 320, 0, 0, 640, 0, 0, 640, 0, 0]):
        t += 0.007 + (0.005 + 1e-4 * n if n else 0.0)
        rows.append({"step": step, "schedule_t": t - 0.001, "complete_t": t, "prefill_tokens": n, "decode_reqs": 4})
    m = fit(pd.DataFrame(rows), (160, 320, 640), 4, "synthetic")
    assert m.decode_s == pytest.approx(0.007)
    assert m.prefill_fixed_s == pytest.approx(0.005, abs=1e-9)
    assert m.prefill_per_token_s == pytest.approx(1e-4)
    with pytest.raises(RuntimeError, match="decode-only steps"):
        fit(pd.DataFrame(rows[:3]), (160,), 4, "synthetic")
    assert math.isfinite(m.mixed_step_s(100))


SHARES = ("stall_share", "min_stall_share", "max_stall_share", "max_load", "realized_min_stall_share")
ABOVE_ONE = ("target_overheads", "max_cost_drift")


@pytest.mark.parametrize("name", [f.name for f in fields(Rules)])
@settings(max_examples=40, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5) | st.booleans() | st.text(max_size=3))
def test_a_rule_takes_exactly_the_values_its_declaration_allows(name: str, value: Any) -> None:
    """Shares in (0, 1), the two factors above 1, the rest positive, all finite; the message names the field
    and its allowed text. ``stall_share`` also lies within [min_stall_share, max_stall_share], else the message
    names stall_share."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    lo = 1 if name in ABOVE_ONE else 0
    in_bounds = number and lo < value and (value < 1 if name in SHARES else value <= BIG)
    shares = {f: getattr(Rules(), f) for f in ("stall_share", "min_stall_share", "max_stall_share")}
    if name in shares:
        shares[name] = value
    ordered = in_bounds and shares["min_stall_share"] <= shares["stall_share"] <= shares["max_stall_share"]
    try:
        Rules(**{name: value})
    except ValueError as exc:
        assert not ordered, exc
        named = name if not in_bounds else "stall_share"
        assert str(exc).startswith(f"config field 'design.{named}' = ") and "is invalid: allowed " in str(exc)
    else:
        assert ordered


def test_each_rule_declares_its_meaning_unit_and_bounds_once() -> None:
    allowed = {f.name: rule.allowed for f, rule in declared(Rules)}
    assert {allowed[n] for n in SHARES} == {"(0, 1)"} and allowed["max_cost_drift"] == "(1, 1000000]"
    assert {f.name: rule.doc for f, rule in declared(Rules)} == RULE_DOCS and all(RULE_DOCS.values())


def test_arms_may_name_values_the_design_derives() -> None:
    raw = parse_config({"arms": [
        {"name": "stock"}, {"name": "dlfp", "dlfp": {}},
        {"name": "cap", "dlfp": {"chunk_min": "@target_chunk", "chunk_max": "@target_chunk",
                                 "chunk_init": "@target_chunk"}},
        {"name": "sarathi", "engine": {"max_num_batched_tokens": "@sarathi_budget"}},
    ], "workload": {"classes": [
        {"name": "short", "weight": 0.75, "prompt_len": {"uniform": [32, 256]}, "output_len": {"uniform": [32, 96]}},
        {"name": "long", "weight": 0.25, "prompt_len": {"uniform": [512, 768]}, "output_len": 8}]}}).raw
    d = derive(DesignSpec.parse(raw["design"]), CPU, workload_facts(raw), raw)
    # T* = 36 ms: (36 - 7 - 5) ms / 0.1 ms per token = 240 tokens; Sarathi adds the 4 decodes.
    cfg = parse_config(raw).with_overrides(d.overrides)
    assert cfg.engine_for("cap").dlfp | {} == {"chunk_min": 240, "chunk_max": 240, "chunk_init": 240,
                                               "itl_slo_ms": 72.0, "enabled": True, "saturation_guard": False}
    assert cfg.engine_for("sarathi").max_num_batched_tokens == 244 and not cfg.engine_for("sarathi").dlfp["enabled"]
    with pytest.raises(ValueError, match=r"arms\[1\].engine.max_num_seqs"):
        parse_config({"arms": [{"name": "stock"}, {"name": "x", "engine": {"max_num_seqs": "@target_chunk"}}]})
    with pytest.raises(ValueError, match="@chunk"):
        parse_config({"arms": [{"name": "stock"}, {"name": "x", "dlfp": {"chunk_max": "@chunk"}}]})


def test_scaled_design_backs_off_the_stall_share_to_fit_the_engine() -> None:
    # Relatively expensive prefills: 3% of gaps would need more load than max_load allows.
    heavy = Measured(decode_s=0.007, prefill_fixed_s=0.005, prefill_per_token_s=3e-4, decoders=4, source="t")
    raw = _config([512, 768])
    d = derive(DesignSpec.parse(raw["design"]), heavy, workload_facts(raw), raw)
    p = d.prediction
    assert d.problems == () and 0.015 <= p.stall_share < 0.03
    assert max(p.stock_load, p.dlfp_load) == pytest.approx(0.8, abs=0.01)


def test_a_budget_below_max_num_seqs_lowers_it_unless_the_arm_sets_it() -> None:
    """vLLM refuses max_num_batched_tokens < max_num_seqs at engine start (found when a derived
    Sarathi budget of 217 tokens met the modeled configs' 256 sequences mid-study): an arm's budget
    lowers the inherited bound; a bound the arm or the engine sets itself is refused before any arm."""
    cfg = parse_config({"engine": {"max_num_seqs": 64},
                        "arms": [{"name": "stock"}, {"name": "small", "engine": {"max_num_batched_tokens": 40}}]})
    assert (cfg.engine_for("small").max_num_seqs, cfg.engine_for("stock").max_num_seqs) == (40, 64)
    assert cfg.arm_label("small") == "max_num_batched_tokens=40, max_num_seqs=40 (lowered to the budget)"
    assert cfg.arm_label("stock") == "stock vLLM"
    with pytest.raises(ValueError, match=r"max_num_seqs. = 50 is invalid: allowed \[1, max_num_batched_tokens = 40\]"):
        parse_config({"arms": [{"name": "stock"},
                               {"name": "x", "engine": {"max_num_batched_tokens": 40, "max_num_seqs": 50}}]})
    with pytest.raises(ValueError, match=r"allowed \[1, max_num_batched_tokens = 32\]"):
        parse_config({"engine": {"max_num_batched_tokens": 32, "max_num_seqs": 64}})
