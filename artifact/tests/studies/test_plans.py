"""The studies beyond the paper: their plans, the frontier and regret, the goal sentence, the
regime boundary and the explanations verdict (pure logic; the runs themselves are slow and
committed).
"""

from __future__ import annotations

import pytest

from dlfp.studies import plans


def test_plans_parse_and_pair_every_arm_on_one_workload() -> None:
    base = plans.baselines()
    assert [str(d) for d, _ in base] == ["cpu-tiny", *plans.MODELED_TARGETS]
    for _, cfg in base:
        assert cfg.arm_names == tuple(a["name"] for a in plans.BASELINE_ARMS)
        assert len(cfg.seeds) == plans.TRIALS
    sens = dict(plans.sensitivity())
    assert set(sens) >= {plans.Path("params")}
    for target, shares in plans.STALL_SHARES.items():
        for share in shares:
            cfg = sens[plans.Path(f"stalls-{target}-{share}")]
            assert len(cfg.seeds) == plans.REGIME_TRIALS  # a sweep point needs an interval with 2 df
            assert cfg.arm_names == ("stock", "dlfp")
    expl = [str(d) for d, _ in plans.explanations()]
    assert {f"{v}-{t}" for v in ("fast-host", "rare-stalls") for t in plans.PAPER_TARGETS} == set(expl)


def test_only_names_an_unknown_entry() -> None:
    with pytest.raises(ValueError, match="not in the baselines plan"):
        plans.main(["baselines", "--out", "/nonexistent", "--only", "gpu-qwen3-9b", "--list"])


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown study target"):
        plans.target_config("tpu-qwen3-8b", {})
