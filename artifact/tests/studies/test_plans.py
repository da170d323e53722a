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


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown study target"):
        plans.target_config("tpu-qwen3-8b", {})


def test_cadence_arms_are_the_sweep_and_the_capped_variant() -> None:
    """Issue 20's prefill-cadence baseline: N = 2, 4, 8 with control off (stock's chunks), and N = 4
    with the baselines' fixed cap; the baselines study runs them after the arms its first runs had,
    and the SLO controller last."""
    arms = {a["name"]: a["dlfp"] for a in plans.CADENCE_ARMS}
    assert arms == {"cadence-2": {"enabled": False, "prefill_every": 2},
                    "cadence-4": {"enabled": False, "prefill_every": 4},
                    "cadence-8": {"enabled": False, "prefill_every": 8},
                    "cadence-4-cap": {**plans._CAP, "prefill_every": 4}}
    assert not {a["name"] for a in plans.PAPER_BASELINE_ARMS} & set(arms)
    assert all("prefill_every" not in (a.get("dlfp") or {}) for a in plans.PAPER_BASELINE_ARMS)
    assert [*plans.PAPER_BASELINE_ARMS, *plans.CADENCE_ARMS, plans.SLO_CONTROLLER_ARM] == plans.BASELINE_ARMS


def test_cadence_arms_parse_as_arms_of_a_study_config() -> None:
    from dlfp.analysis.families import kind

    for target in ("cpu-tiny", "a100-qwen3-8b"):
        cfg = plans.parse_config(plans.target_config(target, {"arms": plans.BASELINE_ARMS}))
        assert cfg.arm_names[-5:-1] == ("cadence-2", "cadence-4", "cadence-8", "cadence-4-cap")
        assert cfg.arm("dlfp-slo").dlfp == {"controller": "slo", "saturation_guard": True}
        for name in cfg.arm_names[-5:-1]:
            assert kind(cfg.arm(name)) == "cadence"
            assert cfg.engine_for(name).dlfp["prefill_every"] in (2, 4, 8)
        assert cfg.engine_for("cadence-4").dlfp["enabled"] is False
        assert cfg.engine_for("cadence-4-cap").dlfp["enabled"] is True


def test_a_target_with_lower_loads_sweeps_them_below_the_studys_own_and_every_one_reaches_higher() -> None:
    from dlfp.trials.sweep import LOADS

    assert plans.capacity_loads("a100-qwen3-8b") == (*LOADS, *plans.HIGHER_LOADS)
    assert plans.capacity_loads("cpu-tiny") == (*plans.LOWER_LOADS["cpu-tiny"], *LOADS, *plans.HIGHER_LOADS)
    assert all(x < LOADS[0] for x in plans.LOWER_LOADS["cpu-tiny"]) and min(plans.HIGHER_LOADS) > LOADS[-1]
    cfg = dict(plans.capacity(targets=("cpu-tiny",)))[plans.Path("cpu-tiny")]
    assert cfg.arm("mbt-512_0.05").load == 0.05 and cfg.arm("stock_0.15").load == 0.15
    assert cfg.arm("dlfp-slo.tight_0.1").dlfp["itl_slo_ms"] == "@itl_slo_tight"


def test_the_capacity_plan_runs_every_arm_at_every_load_and_slo_arms_per_level() -> None:
    from dlfp.trials.sweep import LEVELS

    plan = dict(plans.capacity())
    assert [str(d) for d in plan] == ["cpu-tiny", *plans.MODELED_TARGETS, plans.FIELD_TARGET]
    reduced = {"cpu-tiny": plans.CPU_CAPACITY_ARMS, plans.FIELD_TARGET: plans.FIELD_CAPACITY_ARMS}
    for target, cfg in plan.items():
        assert cfg.design.kind == "capacity" and cfg.reuse_engine and not cfg.token_ids
        assert len(cfg.seeds) == plans.REGIME_TRIALS
        bases = {a.name.rpartition("_")[0] or a.name for a in cfg.arms}
        held = {f"{a['name']}.{lv}" for a in plans.SLO_ARMS for lv in LEVELS}
        fixed = {a["name"] for a in plans.CAPACITY_FIXED_ARMS}
        keep = reduced.get(str(target))
        want = {b for b in fixed | held if keep is None or b.split(".")[0] in keep}
        assert bases == want
        loads = plans.capacity_loads(str(target))
        assert len(cfg.arms) == len(want) * len(loads)
        # An arm's loads are consecutive (one engine serves them), the plain stock is the lowest load's, which
        # is the design's own.
        names = cfg.arm_names
        assert names[:len(loads)] == ("stock", *(f"stock_{lv}" for lv in loads[1:]))
        assert cfg.design.load == loads[0]
        assert cfg.arm("dlfp-slo.tight_0.6").dlfp == {"controller": "slo", "saturation_guard": True,
                                                      "itl_slo_ms": "@itl_slo_tight"}
        assert cfg.arm("dlfp-slo.tight_0.6").load == 0.6 and cfg.arm("stock").load is None
    known = {a["name"] for a in plans.CAPACITY_FIXED_ARMS + plans.SLO_ARMS}
    assert not (set(plans.CPU_CAPACITY_ARMS) | set(plans.FIELD_CAPACITY_ARMS)) - known
    field = plan[plans.Path(plans.FIELD_TARGET)]
    assert field.workload["arrival"] == {"kind": "gamma", "burstiness": 0.5} and len(field.workload["classes"]) == 3


def test_goal_trials_give_the_goal_arms_more_trials_and_the_rest_the_runs_own() -> None:
    """``--goal-trials``: what the controller goal compares (its controllers from the declared file, the fixed
    budgets, stock) runs that many trials; every other arm the plan's, and the unit count says so."""
    from dlfp.studies.controller_goal import load_goal

    base = dict(plans.capacity(3, 40, ("a100-qwen3-8b",)))[plans.Path("a100-qwen3-8b")]
    more = dict(plans.capacity(3, 40, ("a100-qwen3-8b",), goal_trials=10))[plans.Path("a100-qwen3-8b")]
    assert len(more.seeds) == 10 and more.arm_names == base.arm_names
    goal = {a.name for a in more.arms if a.trials is None}
    from dlfp.trials.armid import ArmId

    bases = {ArmId.parse(a).base for a in goal}
    assert bases == {"stock", "mbt-256", "mbt-512", "mbt-1024", "mbt-2048", *load_goal().arms}
    assert all(a.trials == 3 for a in more.arms if a.name not in goal)
    assert more.arms_in(9) == tuple(a for a in more.arm_names if a in goal) and more.arms_in(2) == more.arm_names
    assert more.unit_count == 3 * len(base.arms) + 7 * len(goal)
    assert dict(plans.capacity(3, 40, ("a100-qwen3-8b",), goal_trials=3))[plans.Path("a100-qwen3-8b")] == base


def test_the_virtual_clock_reaches_every_modeled_target_and_no_measured_one() -> None:
    """``--clock virtual``: modeled targets run on the virtual clock without what only a started engine uses,
    the fast-host counterfactual with its engine-core counterpart; the CPU engine stays measured."""
    for folder, cfg in plans.capacity(3, 40):
        raw = plans.with_clock(cfg.raw, "virtual")
        virtual = plans.parse_config(raw).engine
        assert virtual.virtual == (str(folder) != "cpu-tiny"), folder
        assert "reuse_engine" not in raw or str(folder) == "cpu-tiny"
    for folder, cfg in plans.explanations(2, 20):
        sim = plans.with_clock(cfg.raw, "virtual")["engine"]["sim"]
        fast = sim["profile"] == plans.FAST_HOST_PROFILE
        assert (sim.get("engine") == plans.FAST_HOST_ENGINE) == fast, folder
    assert plans.with_clock(plans.capacity(3, 40)[1][1].raw, "real")["engine"]["sim"]["clock"] == "real"
    with pytest.raises(ValueError, match="clock 'wall'"):
        plans.with_clock({}, "wall")

