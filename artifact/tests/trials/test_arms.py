"""A config's arms (``dlfp.trials.arms``): names, the plain reference, sweep keys, derived names."""

from __future__ import annotations

import pytest

from dlfp.harness.engine import EngineSpec
from dlfp.trials.arms import REFERENCE, ArmSpec, arm_engine, parse_arms


def _parse(arms: list) -> tuple[ArmSpec, ...]:
    return parse_arms(arms, EngineSpec(), lambda raw: EngineSpec(**raw))


def test_arms_need_a_plain_reference_and_unique_folder_safe_names() -> None:
    assert _parse([{"name": REFERENCE}, {"name": "dlfp.tight_0.45", "dlfp": {}}])[1].dlfp == {}
    with pytest.raises(ValueError, match="plain 'stock' arm"):
        _parse([{"name": "stock", "dlfp": {}}])
    with pytest.raises(ValueError, match="unique arm names"):
        _parse([{"name": "stock"}, {"name": "stock"}])
    with pytest.raises(ValueError, match=r"arms\[1\].name"):
        _parse([{"name": "stock"}, {"name": "Bad/Name"}])


def test_an_arms_place_on_a_rate_sweep_is_validated() -> None:
    arm = _parse([{"name": "stock"}, {"name": "x", "load": 0.3, "rate_rps": 12, "n_requests": 40}])[1]
    assert (arm.load, arm.rate_rps, arm.n_requests) == (0.3, 12.0, 40)
    for key, bad in (("load", 0), ("load", 11), ("rate_rps", -1.0), ("rate_rps", float("nan")), ("n_requests", 0),
                     ("n_requests", 2.5), ("load", True)):
        with pytest.raises(ValueError, match=rf"arms\[1\]\.{key}"):
            _parse([{"name": "stock"}, {"name": "x", key: bad}])


def test_a_derived_name_is_accepted_only_under_the_keys_that_take_it() -> None:
    _parse([{"name": "stock"}, {"name": "x", "dlfp": {"itl_slo_ms": "@itl_slo_relaxed", "chunk_max": "@target_chunk"}}])
    with pytest.raises(ValueError, match="chunk_max"):
        _parse([{"name": "stock"}, {"name": "x", "dlfp": {"chunk_max": "@itl_slo_tight"}}])
    with pytest.raises(ValueError, match="itl_slo_ms"):
        _parse([{"name": "stock"}, {"name": "x", "dlfp": {"itl_slo_ms": "@target_chunk"}}])


def test_a_budget_below_max_num_seqs_lowers_it_unless_the_arm_sets_it() -> None:
    assert arm_engine({"max_num_batched_tokens": 4096, "max_num_seqs": 64}, {"max_num_batched_tokens": 32}) == \
        {"max_num_batched_tokens": 32, "max_num_seqs": 32}
    assert arm_engine({"max_num_seqs": 64}, {"max_num_batched_tokens": 32, "max_num_seqs": 16})["max_num_seqs"] == 16
