"""The modeled study's design: per-run load and targets from the modeled decode step."""

from __future__ import annotations

import pytest

from dlfp.models import model_path
from dlfp.notebook import modeled_plan
from dlfp.sim.costmodel import ModelShape, load_profile, step_time
from dlfp.sim.study import LONG_STEP_SHARE, StudyRun, decode_step_s, scaled_settings

BASE = "configs/sim-generalization.yaml"


def test_scaled_settings_by_hand() -> None:
    got = scaled_settings(0.010, 0.4)  # a 10 ms decode step, 40% long prompts
    assert got == {"workload": {"rate_rps": 5.0}, "dlfp": {"itl_slo_ms": 40.0},
                   "slo": {"tpot_ms": 40.0, "ttft_ms": 1000.0}}
    with pytest.raises(ValueError):
        scaled_settings(0.0, 0.4)
    with pytest.raises(ValueError):
        scaled_settings(0.01, 0.0)


def test_decode_step_is_the_cost_model_of_a_few_decodes() -> None:
    shape, profile = ModelShape.from_dir(model_path("qwen3-8b")), load_profile("a100")
    cost = step_time(shape, profile, [(1, 1024)] * 4)
    assert decode_step_s(shape, profile, 1, 2) == pytest.approx(cost.gpu_s + cost.host_s)
    assert decode_step_s(shape, profile, 2, 2) < decode_step_s(shape, profile, 1, 2)  # TP splits the reads


def test_plan_scales_each_run_and_keeps_long_prompts_at_the_same_share_of_steps() -> None:
    runs = [{"profile": "a100", "model": "qwen3-0.6b"}, {"profile": "a100", "model": "qwen3-32b", "tp": 2}]
    plan = modeled_plan(BASE, runs, "out", {"trials": 1})
    assert [str(d) for d, _ in plan] == ["out/a100-qwen3-0.6b-tp1", "out/a100-qwen3-32b-tp2"]
    for (_, cfg), entry in zip(plan, runs, strict=True):
        run = StudyRun(**entry)
        d = decode_step_s(ModelShape.from_dir(model_path(run.model)), load_profile(run.profile), run.tp, 2)
        assert cfg.engine.sim == {"profile": run.profile, "async_scheduling": True, "tp": run.tp}
        assert cfg.workload["rate_rps"] * 0.4 * d == pytest.approx(LONG_STEP_SHARE, rel=0.01)
        assert cfg.dlfp["itl_slo_ms"] == pytest.approx(4 * d * 1e3, rel=0.01)
        assert cfg.seeds == (0,)
    assert plan[0][1].workload["rate_rps"] > 10 * plan[1][1].workload["rate_rps"]


@pytest.mark.parametrize(("runs", "needle"), [
    ([], "'runs'"),
    ([{"profile": "a100", "model": "nope"}], "'runs' has"),
    ([{"profile": "tpu", "model": "qwen3-8b"}], "unknown profile 'tpu'"),
    ([{"profile": "a100", "model": "qwen3-8b", "gpus": 2}], "keys profile, model, tp"),
    ([{"profile": "a100", "model": "qwen3-8b", "dlfp": {"gian": 1}}], "gian"),
    ([{"profile": "a100", "model": "qwen3-8b", "tp": 3}], "tp=3 does not divide"),
])
def test_bad_runs_fail_with_the_parameter_named(runs, needle) -> None:
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        modeled_plan(BASE, runs, "out", {})


def test_book_tables_show_every_profile_number_with_its_source_and_each_runs_design() -> None:
    from dlfp.notebook import modeled_design, profile_table

    table = profile_table(["a100", "h200"])
    assert table.loc["compute.peak_tflops"].tolist() == ["312 (public spec)", "989 (public spec)"]
    assert table.notna().all().all() and len(table) == 12
    plan = modeled_plan(BASE, [{"profile": "h200", "model": "qwen3-8b"}], "out", {})
    row = modeled_design(plan).iloc[0]
    assert row["run"] == "h200-qwen3-8b-tp1"
    assert row["DLFP itl_slo_ms"] == pytest.approx(4 * row["modeled decode step (ms)"], rel=0.01)


def test_a_controller_variant_gets_its_own_folder_and_parameters() -> None:
    runs = [{"profile": "a100", "model": "qwen3-0.6b"},
            {"profile": "a100", "model": "qwen3-0.6b", "dlfp": {"signal": "completion"}}]
    (d0, base), (d1, variant) = modeled_plan(BASE, runs, "out", {})
    assert d1.name == "a100-qwen3-0.6b-tp1-signal-completion" and d0 != d1
    assert variant.dlfp == {**base.dlfp, "signal": "completion"}
    assert variant.workload == base.workload
