"""Trial configs (:mod:`dlfp.trials.config`): every shipped trial config parses; fields merge over the
CPU defaults as documented (engine, slo, workload and design key by key, anything else replaced);
arms need a plain ``stock`` reference and are refused by index and field; :func:`merge` deep-merges
without touching its inputs; :func:`run_config` gives back the config a run really ran.

Broad refusals are fuzzed in ``tests/test_fuzz_inputs.py`` and a few named ones are in
``tests/trials/test_runner.py`` and ``tests/trials/test_design.py``; this file adds the promises
they do not pin down.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dlfp.paths import CONFIGS, REPO_ROOT
from dlfp.trials.arms import REFERENCE, ArmSpec
from dlfp.trials.config import (
    CPU_DEFAULT,
    DEFAULT_ARMS,
    TrialConfig,
    load_config,
    merge,
    parse_config,
    read_yaml,
    run_config,
)
from dlfp.trials.schema import Manifest, read_manifest

NOT_TRIAL_CONFIGS = {"claims.yaml": ["claims", "setting"], "controller-goal.yaml": ["criteria", "held_out"]}
"""Files in configs/ that are no trial config, and the fields that make parse_config refuse them."""
SHIPPED = sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name not in NOT_TRIAL_CONFIGS)


def test_configs_folder_is_the_repositorys() -> None:
    assert CONFIGS == REPO_ROOT / "configs" and "cpu-default.yaml" in SHIPPED and len(SHIPPED) >= 10


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_trial_config_parses(name: str) -> None:
    cfg = load_config(str(CONFIGS / name))
    assert isinstance(cfg, TrialConfig) and cfg.name
    assert cfg.arm_names[0] == REFERENCE and len(set(cfg.arm_names)) == len(cfg.arm_names) >= 2
    stock = cfg.arm(REFERENCE)
    assert stock.dlfp is None and stock.engine == {} and cfg.engine_for(REFERENCE).dlfp["enabled"] is False
    for arm in cfg.arms:
        assert cfg.engine_for(arm.name).dlfp["enabled"] is (arm.dlfp is not None)
    assert len(cfg.seeds) == cfg.raw["trials"]
    assert parse_config(json.loads(json.dumps(cfg.raw))) == cfg  # as the manifest records it


@pytest.mark.parametrize(("name", "fields"), NOT_TRIAL_CONFIGS.items())
def test_other_yaml_in_configs_is_refused_as_a_trial_config(name: str, fields: list[str]) -> None:
    with pytest.raises(ValueError, match=re.escape(f"unknown config field(s) {fields!r}")):
        load_config(str(CONFIGS / name))


def test_cpu_default_yaml_spells_out_the_defaults() -> None:
    assert load_config(str(CONFIGS / "cpu-default.yaml")) == parse_config({})


def test_defaults_are_the_cpu_default_and_stay_untouched() -> None:
    before = copy.deepcopy(CPU_DEFAULT)
    cfg = parse_config({})
    assert cfg.raw == CPU_DEFAULT and cfg.raw is not CPU_DEFAULT
    cfg.raw["engine"]["model"] = "changed"
    cfg.raw["arms"].append({"name": "x"})
    assert before == CPU_DEFAULT and DEFAULT_ARMS == [{"name": "stock"}, {"name": "dlfp", "dlfp": {}}]
    assert cfg.seeds == (0, 1, 2) and cfg.arm_names == ("stock", "dlfp")
    assert (cfg.ttft_slo_s, cfg.tpot_slo_s, cfg.telemetry_interval_s) == (5.0, 0.1, 0.5)
    assert cfg.engine.model == "qwen3-tiny" and cfg.engine.max_num_seqs == 64 and cfg.design.kind == "scaled"


def test_engine_slo_workload_design_merge_key_by_key() -> None:
    cfg = parse_config({"engine": {"max_num_seqs": 8}, "slo": {"tpot_ms": 50}, "workload": {"n_requests": 7},
                        "design": {"kind": "fixed"}})
    assert cfg.engine.max_num_seqs == 8 and cfg.engine.model == "qwen3-tiny" and cfg.engine.dtype == "float32"
    assert (cfg.tpot_slo_s, cfg.ttft_slo_s) == (0.05, 5.0)
    assert cfg.workload["n_requests"] == 7 and cfg.workload["classes"] == CPU_DEFAULT["workload"]["classes"]
    assert cfg.design.kind == "fixed"


def test_dlfp_and_arms_are_replaced_whole() -> None:
    cfg = parse_config({"dlfp": {"gain": 1.0}, "arms": [{"name": "stock"}, {"name": "fast", "dlfp": {"gain": 2}}]})
    assert cfg.dlfp == {"gain": 1.0} and cfg.arm_names == ("stock", "fast")
    # The arm's parameters win over the common ones; DLFP is on for it and off for stock.
    assert cfg.engine_for("fast").dlfp == {"saturation_guard": False, "gain": 2, "enabled": True}
    assert cfg.engine_for("stock").dlfp == {"saturation_guard": False, "gain": 1.0, "enabled": False}


def test_seeds_default_to_the_trial_indices_or_are_taken_as_given() -> None:
    assert parse_config({"trials": 4}).seeds == (0, 1, 2, 3)
    assert parse_config({"trials": 2, "seeds": [11, 5]}).seeds == (11, 5)
    assert parse_config({"trials": 2, "seeds": [11, 5]}).workload_spec(5).seed == 5
    with pytest.raises(ValueError, match=r"'seeds' = \[1\] is invalid: allowed null or a list of trials = 2"):
        parse_config({"trials": 2, "seeds": [1]})
    with pytest.raises(ValueError, match=r"'trials' = True is invalid"):
        parse_config({"trials": True})


@pytest.mark.parametrize(("raw", "message"), [
    ([1], "a trial config must be a mapping, got list"),
    ({"name": ""}, "config field 'name' = '' is invalid: allowed a non-empty text"),
    ({"telemetry_interval_s": 0}, "config field 'telemetry_interval_s' = 0 is invalid: allowed (0, 60]"),
    ({"telemetry_interval_s": True}, "config field 'telemetry_interval_s' = True is invalid"),
    ({"slo": {"ttft_ms": 10, "itl_ms": 5}}, "unknown slo field(s) ['itl_ms']; known: ['tpot_ms', 'ttft_ms']"),
    ({"slo": {"tpot_ms": "50"}}, "config field 'slo.tpot_ms' = '50' is invalid"),
    ({"workload": {"seed": 3}}, "config field 'workload.seed' = 3 is invalid: allowed unset: trial seeds come"),
    ({"dlfp": {"step_log": "x"}}, "config field 'dlfp.step_log' = 'x' is invalid: allowed unset"),
    ({"dlfp": {"gian": 1}}, "config field 'dlfp': unknown dlfp parameter(s) ['gian']"),
    ({"engine": {"dtype": "int4"}}, "config field 'engine.dtype' = 'int4' is invalid"),
    ({"engine": {"max_num_seqs": True}}, "config field 'engine.max_num_seqs' = True is invalid"),
    ({"engine": {"max_num_seqs": 5000}}, "'engine.max_num_seqs' = 5000 is invalid: allowed [1, "
                                         "max_num_batched_tokens = 4096]"),
    ({"engine": {"max_model_len": 2**21}}, "'engine.max_model_len' = 2097152 is invalid: allowed [1, 1048576]"),
    ({"engine": {"async_scheduling": "yes"}}, "'engine.async_scheduling' = 'yes' is invalid: allowed null or true "
                                              "or false"),
    ({"engine": {"extra": {1: 2}}}, "'engine.extra' = {1: 2} is invalid: allowed a mapping"),
    ({"engine": {"extra": {"x": float("nan")}}}, "config field 'engine.extra'"),
    ({"design": {"kind": "adaptive"}}, "config field 'design.kind' = 'adaptive' is invalid"),
    ({"design": {"stall_shares": 0.1}}, "unknown design setting(s) ['stall_shares']"),
    ({"warmup_requests": -1}, "config field 'warmup_requests' = -1 is invalid: allowed [0, 10000]"),
    ({"warmup_requests": 2.5}, "config field 'warmup_requests' = 2.5 is invalid: allowed [0, 10000]"),
    ({"warmup_requests": True}, "config field 'warmup_requests' = True is invalid"),
    ({"token_ids": "no"}, "config field 'token_ids' = 'no' is invalid: allowed true or false"),
    ({"reuse_engine": 1}, "config field 'reuse_engine' = 1 is invalid: allowed true or false"),
])
def test_bad_fields_are_refused_naming_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_config(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_warm_up_and_token_ids_default_on_and_are_recorded() -> None:
    config = parse_config({})
    assert (config.warmup_requests, config.token_ids) == (16, True)
    assert {k: config.raw[k] for k in ("warmup_requests", "token_ids")} == {"warmup_requests": 16, "token_ids": True}
    lean = parse_config({"warmup_requests": 0, "token_ids": False})
    assert (lean.warmup_requests, lean.token_ids) == (0, False)


def test_a_class_longer_than_the_model_is_refused_naming_the_limit() -> None:
    with pytest.raises(ValueError, match=r"'engine.max_model_len' = 700 is invalid: allowed >= 800: "
                                         r"workload.classes\[1\] \('long'\)"):
        parse_config({"engine": {"max_model_len": 700}, "workload": {"max_model_len": None}})  # 768 + 32 tokens


LONG_CONTEXT = {"name": "long-context", "prompt_len": {"uniform": [8192, 32768]}, "output_len": {"uniform": [16, 128]}}


def test_a_long_context_class_is_refused_before_any_work_naming_both_numbers() -> None:
    """An 8-32k-token class on an 8k model: refused at parse time (not after a pre-flight, not by the one
    seed whose draw happens to exceed), with the model length and the class's need."""
    raw = {"engine": {"max_model_len": 40960}, "workload": {"max_model_len": 8192, "classes": [LONG_CONTEXT]}}
    with pytest.raises(ValueError) as err:
        parse_config(raw)
    assert ("'workload.max_model_len' = 8192 is invalid: allowed >= 32896: workload.classes[0] ('long-context') "
            "can ask prompt_len + output_len = 32768 + 128 = 32896 tokens") in str(err.value)
    assert parse_config(merge(raw, {"workload": {"max_model_len": 32896}})).workload_spec(0).max_model_len == 32896


@pytest.mark.parametrize(("workload", "message"), [
    ({"arrival": {"kind": "gamma", "burstiness": -1}}, "arrival: burstiness=-1 is invalid"),
    ({"arrival": {"kind": "weibull"}}, "arrival: kind='weibull' is invalid; allowed: poisson or gamma"),
    ({"arrival": {"kind": "gamma", "burstines": 0.5}}, "arrival: unknown key(s) ['burstines']"),
    ({"classes": [{**LONG_CONTEXT, "prompt_len": {"lognormal": {"median": 9000, "p90": 100, "min": 8192,
                                                                "max": 12000}}}]},
     "classes[0].prompt_len: p90=100 is invalid"),
])
def test_new_workload_fields_are_refused_by_name(workload: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_config({"engine": {"max_model_len": 40960}, "workload": {"max_model_len": 40960, **workload}})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_field_example_parses_to_its_published_statistics() -> None:
    """configs/workloads-field.yaml: gamma arrivals, lognormal classes at the cited medians and P90s."""
    spec = load_config(str(CONFIGS / "workloads-field.yaml")).workload_spec(0)
    assert (spec.arrival.kind, spec.arrival.burstiness) == ("gamma", 0.5)
    chat, summary, ctx = spec.classes
    assert (chat.prompt_len.median, summary.prompt_len.median) == (1730, 7059)
    assert chat.prompt_len.sigma == pytest.approx(0.93, abs=0.005)
    assert (ctx.prompt_len.lo, ctx.prompt_len.hi) == (8192, 32768)


# --- arms ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arms", "message"), [
    ([], "config field 'arms' = [] is invalid: allowed a non-empty list"),
    ({"name": "stock"}, "config field 'arms' = {'name': 'stock'} is invalid"),
    ([{"name": "dlfp", "dlfp": {}}], "allowed a plain 'stock' arm (no dlfp, no engine overrides)"),
    ([{"name": "stock", "dlfp": {}}], "allowed a plain 'stock' arm"),
    ([{"name": "stock", "engine": {"max_num_seqs": 8}}], "allowed a plain 'stock' arm"),
    ([{"name": "stock"}, {"name": "stock"}], "config field 'arms' = ['stock', 'stock'] is invalid: allowed "
                                             "unique arm names"),
    ([{"name": "stock"}, "dlfp"], "config field 'arms[1]' = 'dlfp' is invalid: allowed a mapping"),
    ([{"name": "stock"}, {"name": "Big"}], "config field 'arms[1].name' = 'Big' is invalid"),
    ([{"name": "stock"}, {"name": "a/b"}], "config field 'arms[1].name' = 'a/b' is invalid"),
    ([{"name": "stock"}, {"name": "x" * 41}], "config field 'arms[1].name'"),
    ([{"name": "stock"}, {"name": "x", "gain": 1}], "unknown key(s) ['gain'] in config field 'arms[1]'"),
    ([{"name": "stock"}, {"name": "x", "dlfp": 1}], "config field 'arms[1].dlfp' = 1 is invalid"),
    ([{"name": "stock"}, {"name": "x", "dlfp": {"enabled": True}}], "config field 'arms[1].dlfp.enabled'"),
    ([{"name": "stock"}, {"name": "x", "dlfp": {"gain": 5}}], "config field 'arms[1].dlfp': dlfp parameter "
                                                              "'gain' = 5 is invalid"),
    ([{"name": "stock"}, {"name": "x", "engine": {"dtype": "bfloat16"}}], "config field 'arms[1].engine'"),
    ([{"name": "stock"}, {"name": "x", "engine": {"max_num_seqs": 0}}], "config field 'engine.max_num_seqs' = 0"),
    ([{"name": "stock"}, {"name": "x", "trials": 0}], "config field 'arms[1].trials' = 0 is invalid: allowed null"),
    ([{"name": "stock"}, {"name": "x", "trials": True}], "config field 'arms[1].trials' = True is invalid"),
    ([{"name": "stock"}, {"name": "x", "trials": 4}], "config field 'arms[1].trials' = 4 is invalid: allowed at "
                                                      "most trials = 3"),
    ([{"name": "stock", "trials": 2}], "config field 'arms[0].trials' = 2 is invalid: allowed unset: the 'stock' "
                                       "reference runs in every trial"),
])
def test_bad_arms_are_refused_by_index_and_field(arms: Any, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_config({"arms": arms})
    assert message in str(err.value)


def test_arms_with_engine_overrides_and_their_labels() -> None:
    cfg = parse_config({"arms": [
        {"name": "stock"},
        {"name": "dlfp", "dlfp": {}},
        {"name": "tuned", "dlfp": {"gain": 1.0, "chunk_max": 512}},
        {"name": "chunked-512", "engine": {"max_num_batched_tokens": 512, "long_prefill_token_threshold": 256}},
    ]})
    assert cfg.arm("chunked-512") == ArmSpec("chunked-512", None,
                                             {"max_num_batched_tokens": 512, "long_prefill_token_threshold": 256})
    engine = cfg.engine_for("chunked-512")
    assert (engine.max_num_batched_tokens, engine.long_prefill_token_threshold) == (512, 256)
    assert engine.dlfp == {"saturation_guard": False, "enabled": False}
    assert cfg.engine_for("stock").max_num_batched_tokens == 4096
    assert [cfg.arm_label(a) for a in cfg.arm_names] == [
        "stock vLLM", "DLFP", "DLFP(chunk_max=512, gain=1.0)",
        "long_prefill_token_threshold=256, max_num_batched_tokens=512"]
    with pytest.raises(KeyError, match=r"config 'cpu-default' has no arm 'sarathi'; arms: \['stock', 'dlfp', "):
        cfg.arm("sarathi")


# --- merge, with_overrides, run_config -----------------------------------------------------------


def test_merge_is_deep_for_mappings_and_replaces_anything_else() -> None:
    base = {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "l": [1, 2], "s": "keep", "m": 5}
    over = {"a": {"y": {"q": 3}, "z": 0}, "l": [9], "m": {"now": "a mapping"}, "new": [{"k": 1}]}
    base_copy, over_copy = copy.deepcopy(base), copy.deepcopy(over)
    out = merge(base, over)
    assert out == {"a": {"x": 1, "y": {"p": 1, "q": 3}, "z": 0}, "l": [9], "s": "keep", "m": {"now": "a mapping"},
                   "new": [{"k": 1}]}
    assert base == base_copy and over == over_copy
    out["a"]["y"]["p"] = 99
    out["new"][0]["k"] = 99
    assert base == base_copy and over == over_copy  # the result shares nothing with its inputs
    assert merge(base, {}) == base and merge({}, over) == over


def test_trial_arms_run_the_paper_law_without_the_saturation_guard_unless_they_ask() -> None:
    """The paper's law as published had no guard, so a trial's arms run without it; the config or an arm
    turns it on (the plug-in's own default is on)."""
    from dlfp.control.params import DLFPParams

    assert DLFPParams().saturation_guard is True
    cfg = parse_config({"arms": [{"name": "stock"}, {"name": "dlfp", "dlfp": {}},
                                 {"name": "slo", "dlfp": {"controller": "slo", "saturation_guard": True}}]})
    assert cfg.engine_for("dlfp").dlfp["saturation_guard"] is False
    assert cfg.engine_for("slo").dlfp["saturation_guard"] is True
    assert cfg.arm_dlfp("slo") == {"saturation_guard": True, "controller": "slo"}
    on = parse_config({"dlfp": {"saturation_guard": True}})
    assert on.engine_for("dlfp").dlfp["saturation_guard"] is True


def test_with_overrides_merges_and_validates_again() -> None:
    cfg = parse_config({})
    ran = cfg.with_overrides({"workload": {"rate_rps": 6.5}, "dlfp": {"itl_slo_ms": 72.0}, "slo": {"tpot_ms": 72}})
    assert ran.workload["rate_rps"] == 6.5 and ran.workload["n_requests"] == 100
    assert ran.dlfp == {"itl_slo_ms": 72.0} and ran.tpot_slo_s == pytest.approx(0.072)
    assert cfg.workload["rate_rps"] == 4.0  # the original is unchanged
    with pytest.raises(ValueError, match="'gain' = 7"):
        cfg.with_overrides({"dlfp": {"gain": 7}})


def recorded(**fields: Any) -> Manifest:
    """A manifest recording only these fields (a complete run of no units)."""
    return Manifest(status="complete", units=[], **fields)


def test_run_config_applies_the_design_overrides() -> None:
    cfg = parse_config({"trials": 2})
    overrides = {"workload": {"rate_rps": 6.28}, "dlfp": {"itl_slo_ms": 71.6}, "slo": {"tpot_ms": 71.6}}
    ran = run_config(recorded(config=json.loads(json.dumps(cfg.raw)), design={"overrides": overrides}))
    assert ran == cfg.with_overrides(overrides)
    assert (ran.workload["rate_rps"], ran.dlfp["itl_slo_ms"], ran.tpot_slo_s) == (6.28, 71.6, 0.0716)
    assert run_config(recorded(config=cfg.raw, design={})) == cfg  # a design that overrode nothing
    assert run_config(recorded(config=cfg.raw, design=None)) == cfg


def test_a_run_from_before_designs_ran_its_config_as_written() -> None:
    raw = {k: v for k, v in parse_config({}).raw.items() if k != "design"}
    assert run_config(recorded(config=raw)).design.kind == "fixed"
    assert run_config(recorded(config={**raw, "design": {"kind": "scaled"}})).design.kind == "scaled"


def test_run_config_of_the_committed_run() -> None:
    manifest = read_manifest(REPO_ROOT / "data/runs/cpu-default")
    ran = run_config(manifest)
    requested = parse_config(manifest.config)
    assert ran == requested.with_overrides((manifest.design or {})["overrides"])
    assert ran.name == manifest.config["name"] and ran.arm_names == requested.arm_names


# --- YAML files ------------------------------------------------------------------------------------


def test_read_yaml(tmp_path: Path) -> None:
    empty, listed, broken = tmp_path / "e.yaml", tmp_path / "l.yaml", tmp_path / "b.yaml"
    empty.write_text("# only a comment\n", encoding="utf-8")
    listed.write_text("- 1\n- 2\n", encoding="utf-8")
    broken.write_text("trials: [1, 2\n", encoding="utf-8")
    assert read_yaml(str(empty)) == {} and load_config(str(empty)) == parse_config({})
    with pytest.raises(ValueError, match=rf"config file {listed}: expected a mapping of config fields, got list"):
        read_yaml(str(listed))
    with pytest.raises(ValueError, match=rf"config file {broken}: cannot read it as YAML \("):
        read_yaml(str(broken))
    with pytest.raises(FileNotFoundError):
        read_yaml(str(tmp_path / "missing.yaml"))


def test_an_arm_may_turn_control_off_and_keep_its_other_parameters() -> None:
    """``dlfp: {enabled: false, prefill_every: 4}`` is a prefill-cadence baseline with stock's chunks:
    engine_for keeps the explicit ``enabled: false`` (and the cadence) instead of switching DLFP on
    because the arm has a mapping; a mapping without ``enabled`` still means on, no mapping off."""
    import dataclasses

    base = parse_config({"dlfp": {"gain": 1.0}, "arms": [{"name": "stock"}, {"name": "dlfp", "dlfp": {}}]})
    cadence = ArmSpec("cadence-4", {"enabled": False, "prefill_every": 4}, {})
    capped = ArmSpec("cadence-4-cap", {"chunk_min": 64, "chunk_max": 64, "chunk_init": 64, "prefill_every": 4}, {})
    cfg = dataclasses.replace(base, arms=(*base.arms, cadence, capped))
    assert cfg.engine_for("cadence-4").dlfp == {"saturation_guard": False, "gain": 1.0, "enabled": False,
                                                "prefill_every": 4}
    assert cfg.engine_for("cadence-4-cap").dlfp["enabled"] is True
    assert cfg.engine_for("cadence-4-cap").dlfp["prefill_every"] == 4
    assert cfg.engine_for("dlfp").dlfp == {"saturation_guard": False, "gain": 1.0, "enabled": True}
    assert cfg.engine_for("stock").dlfp == {"saturation_guard": False, "gain": 1.0, "enabled": False}


def test_an_integral_float_passes_as_the_integer_it_means() -> None:
    """A config may write 2.0 where a count is meant (YAML, JSON from another tool): it is checked as a number and
    counted with as an int, so a trial, an engine argument or a modeled TP never receives a float."""
    cfg = parse_config({"trials": 2.0, "warmup_requests": 4.0, "engine": {"max_num_seqs": 32.0, "sim": {"tp": 1.0}}})
    assert (cfg.seeds, cfg.warmup_requests, cfg.engine.max_num_seqs) == ((0, 1), 4, 32)
    assert type(cfg.warmup_requests) is int and type(cfg.engine.max_num_seqs) is int
