"""The control law's invariants (hypothesis) and the parameter validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.control.law import DLFPController, next_chunk
from dlfp.control.params import SPECS, DLFPConfigError, DLFPParams, parse_params
from dlfp.control.protocol import Observation, StepContext


def decide(controller: Any, **context: Any) -> Any:
    """One decision from a step context made of ``context``."""
    return controller.decide(StepContext(**context))



@st.composite
def params(draw: st.DrawFn) -> DLFPParams:
    chunk_min = draw(st.integers(1, 4096))
    chunk_max = draw(st.integers(chunk_min, 8192))
    return DLFPParams(
        itl_slo_ms=draw(st.floats(1.0, 1000.0)),
        target_fraction=draw(st.floats(0.05, 1.0)),
        gain=draw(st.floats(0.01, 2.0)),
        chunk_min=chunk_min,
        chunk_max=chunk_max,
        chunk_init=draw(st.integers(chunk_min, chunk_max)),
    )


intervals = st.floats(0.0, 100.0, allow_nan=False)


@given(params(), intervals, st.floats(0.0, 1e6))
def test_chunk_stays_in_range(p: DLFPParams, interval: float, chunk: float) -> None:
    assert p.chunk_min <= next_chunk(chunk, interval, p) <= p.chunk_max


@given(params(), intervals)
def test_direction_follows_error(p: DLFPParams, interval: float) -> None:
    c = DLFPController(p)
    before = c.chunk
    d = decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(interval, True))
    assert d.updated and d.cap is not None
    if interval > p.target_interval_s:
        assert c.chunk <= before
    elif interval < p.target_interval_s:
        assert c.chunk >= before
    else:
        assert c.chunk == before
    assert d.cap == int(c.chunk)


@given(params(), intervals)
def test_unguarded_cycle_changes_nothing(p: DLFPParams, interval: float) -> None:
    c = DLFPController(p)
    before = c.chunk
    d = decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(interval, False))
    assert not d.updated and c.chunk == before and d.cap == int(before)
    d = decide(c, decodes_running=True, prefill_waiting=True, obs=None)
    assert not d.updated and c.chunk == before


@given(params(), intervals, st.booleans(), st.booleans())
def test_full_budget_unless_prefill_meets_decodes(
    p: DLFPParams, interval: float, decodes: bool, prefill: bool
) -> None:
    c = DLFPController(p)
    before = c.chunk
    d = decide(c, decodes_running=decodes, prefill_waiting=prefill, obs=Observation(interval, True))
    if not (decodes and prefill):
        assert d.cap is None and not d.updated and c.chunk == before
    else:  # the mixed step is capped at the adapted chunk: the branch above is not the only one checked
        assert d.updated and d.cap == int(c.chunk)


@given(params(), intervals)
def test_disabled_controller_never_caps(p: DLFPParams, interval: float) -> None:
    off = DLFPParams(**{**{s: getattr(p, s) for s in p.__slots__}, "enabled": False})
    d = decide(DLFPController(off),
        decodes_running=True, prefill_waiting=True, obs=Observation(interval, True)
    )
    assert d.cap is None


def test_law_hand_computed() -> None:
    p = DLFPParams(itl_slo_ms=100, target_fraction=0.5, gain=0.5, chunk_min=32, chunk_max=2048)
    # T* = 50 ms; T = 100 ms: factor 1 + 0.5 * (50 - 100) / 50 = 0.5
    assert next_chunk(256, 0.100, p) == pytest.approx(128)
    # T = 25 ms: factor 1.25
    assert next_chunk(256, 0.025, p) == pytest.approx(320)
    # far above target: clamped at chunk_min, never negative
    assert next_chunk(256, 10.0, p) == 32


def test_defaults_match_spec_table() -> None:
    defaults = DLFPParams()
    for spec in SPECS:
        assert getattr(defaults, spec.name) == spec.default
    assert {s.name for s in SPECS} == set(defaults.__slots__)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"gian": 0.5}, "gian"),
        ({"gain": 0.0}, "'gain' = 0.0"),
        ({"gain": 3}, "(0, 2]"),
        ({"chunk_min": 0}, "'chunk_min' = 0"),
        ({"chunk_min": 64, "chunk_max": 32}, "'chunk_max' = 32"),
        ({"chunk_init": 4096}, "[chunk_min = 32, chunk_max = 2048]"),
        ({"chunk_min": 1.5}, "'chunk_min' = 1.5"),
        ({"signal": "gpu"}, "schedule or completion"),
        ({"enabled": "yes"}, "'enabled'"),
        ({"itl_slo_ms": -5}, "(0, 60000]"),
        ({"target_fraction": True}, "'target_fraction'"),
        ({"anti_windup": 1}, "'anti_windup' = 1"),
    ],
)
def test_bad_config_is_named(raw: dict, needle: str) -> None:
    with pytest.raises(DLFPConfigError) as err:
        parse_params(raw)
    assert needle in str(err.value)


def test_target_interval() -> None:
    assert parse_params({"itl_slo_ms": 80, "target_fraction": 0.25}).target_interval_s == 0.02


@given(params(), intervals, st.booleans())
def test_anti_windup_never_grows_after_an_unfilled_step(p: DLFPParams, interval: float, saturated: bool) -> None:
    guarded = DLFPParams(**{**{k: getattr(p, k) for k in p.__slots__}, "anti_windup": True})
    paper, held = DLFPController(p), DLFPController(guarded)
    obs = Observation(interval, True, saturated=saturated)
    decide(paper, decodes_running=True, prefill_waiting=True, obs=obs)
    d = decide(held, decodes_running=True, prefill_waiting=True, obs=obs)
    assert d.updated
    if saturated or interval >= p.target_interval_s:
        assert held.chunk == paper.chunk  # the paper's law whenever it shrinks or the cap was filled
    else:
        assert held.chunk == float(p.chunk_init)  # a fast step that did not fill its cap holds C


def test_anti_windup_hand_computed() -> None:
    p = parse_params({"itl_slo_ms": 100, "gain": 0.5, "chunk_init": 1000, "anti_windup": True})
    c = DLFPController(p)
    decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(0.025, True, saturated=False))
    assert c.chunk == 1000.0  # 25 ms < T* = 50 ms, but only 200 of 1000 tokens were prefilled: hold
    decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(0.025, True, saturated=True))
    assert c.chunk == pytest.approx(1250.0)  # 1000 * (1 + 0.5 * (50 - 25) / 50)
    decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(0.100, True, saturated=False))
    assert c.chunk == pytest.approx(625.0)  # shrinking never waits: 1250 * (1 - 0.5)


def test_an_explicit_target_replaces_the_slo_target() -> None:
    p = DLFPParams(itl_slo_ms=100.0, target_fraction=0.5, gain=0.5)  # T* = 50 ms
    assert next_chunk(1000.0, 0.020, p, target_s=0.010) == pytest.approx(500.0)  # 1000 * (1 + 0.5 * (10-20)/10)
    c = DLFPController(p)
    decide(c, decodes_running=True, prefill_waiting=True, obs=Observation(0.020, True), target_s=0.040)
    assert c.chunk == pytest.approx(256 * (1 + 0.5 * 0.5))
