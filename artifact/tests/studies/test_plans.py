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


def test_list_names_every_arm(capsys: pytest.CaptureFixture[str]) -> None:
    """The capacity study's 161 arms once made its start line a screenful; --list is where they all are."""
    assert plans.main(["capacity", "--out", "/nonexistent", "--only", "a100-qwen3-0.6b", "--list"]) == 0
    listed = capsys.readouterr().err
    assert listed.count("stock_0.3") == 1 and "dlfp-slo.relaxed_1.2" in listed and "more" not in listed


def test_a_run_names_a_few_arms(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dlfp.trials import runner

    monkeypatch.setattr(runner, "run_trials", lambda cfg, out, allow_dirty, workers: {"status": "complete"})
    assert plans.main(["baselines", "--out", "/nonexistent", "--only", "cpu-tiny"]) == 0
    started = capsys.readouterr().err
    assert f"{len(plans.BASELINE_ARMS)} arms stock, " in started and f"{len(plans.BASELINE_ARMS) - 6} more" in started


def test_the_stability_plan_repeats_the_default_design_as_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    """Each repetition is the default paired design itself (its trials, requests, seeds and design), in its own
    folder with its own pre-flight; fewer than STABILITY_TIMES repetitions is refused by the command."""
    from dlfp.trials.config import load_config

    default = load_config(plans.CPU_BASE)
    plan = plans.stability()
    assert [str(d) for d, _ in plan] == [f"rep-{i}" for i in range(1, plans.STABILITY_TIMES + 1)]
    for _, cfg in plan:
        assert cfg.seeds == default.seeds and cfg.workload == default.workload and cfg.arms == default.arms
        assert cfg.design == default.design and cfg.engine == default.engine
    assert plans.main(["stability", "--out", "/nonexistent", "--times", "7", "--list"]) == 0
    assert capsys.readouterr().err.count("/nonexistent/rep-") == 7
    with pytest.raises(ValueError, match="at least 5 repetitions"):
        plans.main(["stability", "--out", "/nonexistent", "--times", "3", "--list"])
    with pytest.raises(ValueError, match="--times belongs to the stability study"):
        plans.main(["baselines", "--out", "/nonexistent", "--times", "7", "--list"])
    quick = plans.stability(trials=2, requests=20, times=1)
    assert len(quick[0][1].seeds) == 2 and quick[0][1].workload["n_requests"] == 20


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


def test_the_capacity_plan_runs_every_arm_at_every_load_and_slo_arms_per_level() -> None:
    from dlfp.trials.sweep import LEVELS, LOADS

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
        assert len(cfg.arms) == len(want) * len(LOADS)
        # An arm's loads are consecutive (one engine serves them), the plain stock is the lowest load's.
        names = cfg.arm_names
        assert names[:len(LOADS)] == ("stock", *(f"stock_{lv}" for lv in LOADS[1:]))
        assert cfg.arm("dlfp-slo.tight_0.6").dlfp == {"controller": "slo", "saturation_guard": True,
                                                      "itl_slo_ms": "@itl_slo_tight"}
        assert cfg.arm("dlfp-slo.tight_0.6").load == 0.6 and cfg.arm("stock").load is None
    known = {a["name"] for a in plans.CAPACITY_FIXED_ARMS + plans.SLO_ARMS}
    assert not (set(plans.CPU_CAPACITY_ARMS) | set(plans.FIELD_CAPACITY_ARMS)) - known
    field = plan[plans.Path(plans.FIELD_TARGET)]
    assert field.workload["arrival"] == {"kind": "gamma", "burstiness": 0.5} and len(field.workload["classes"]) == 3


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


def test_skip_measured_leaves_the_cpu_engine_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert plans.main(["capacity", "--out", "/nonexistent", "--clock", "virtual", "--skip-measured", "--list"]) == 0
    listed = capsys.readouterr().err
    assert "cpu-tiny" not in listed and "a100-qwen3-32b" in listed and "h200-qwen3-8b-field" in listed
