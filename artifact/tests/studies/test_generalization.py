"""The modeled study's design: per-run load and targets from the modeled decode step."""

from __future__ import annotations

import pytest

from dlfp.book.notebook import modeled_plan
from dlfp.studies.generalization import STUDY_RUNS, StudyRun

BASE = "configs/sim-generalization.yaml"


def test_plan_gives_each_run_its_profile_shape_and_a_scaled_design() -> None:
    runs = [{"profile": "a100", "model": "qwen3-0.6b"}, {"profile": "a100", "model": "qwen3-32b", "tp": 2}]
    plan = modeled_plan(BASE, runs, "out", {"trials": 1})
    assert [str(d) for d, _ in plan] == ["out/a100-qwen3-0.6b-tp1", "out/a100-qwen3-32b-tp2"]
    for (_, cfg), entry in zip(plan, runs, strict=True):
        run = StudyRun(**entry)
        assert cfg.engine.sim == {"profile": run.profile, "async_scheduling": True, "tp": run.tp}
        assert cfg.engine.model == run.model and cfg.seeds == (0,)
        assert cfg.design.kind == "scaled"  # rate, target and SLOs come from each run's own pre-flight
    assert len(modeled_plan(BASE, None, "out", {})) == len(STUDY_RUNS)


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


def test_profile_table_shows_every_number_with_its_source() -> None:
    from dlfp.book.notebook import profile_table

    table = profile_table(["a100", "h200"])
    assert table.loc["compute.peak_tflops"].tolist() == ["312 (public spec)", "989 (public spec)"]
    assert table.notna().all().all() and len(table) == 12


def test_a_controller_variant_gets_its_own_folder_and_parameters() -> None:
    runs = [{"profile": "a100", "model": "qwen3-0.6b"},
            {"profile": "a100", "model": "qwen3-0.6b", "dlfp": {"signal": "completion"}}]
    (d0, base), (d1, variant) = modeled_plan(BASE, runs, "out", {})
    assert d1.name == "a100-qwen3-0.6b-tp1-signal-completion" and d0 != d1
    assert variant.dlfp == {**base.dlfp, "signal": "completion"}
    assert variant.workload == base.workload


def test_finding_counts_settings_by_where_their_interval_lies() -> None:
    import math

    import pandas as pd

    from dlfp.studies.generalization import finding

    table = pd.DataFrame({"ITL reduction (%)": [88.0, -12.0, 3.0, 5.0], "ITL CI lo (%)": [80.0, -20.0, -4.0, math.nan],
                          "ITL CI hi (%)": [95.0, -4.0, 9.0, math.nan]})
    assert finding(table, "Simulated") == (
        "Simulated: DLFP's P99 ITL reduction against stock (paired 95% CI) lies above zero on 1, below zero on 1 "
        "and neither (or untested) on 2 of 4 settings; the means range from -12.0% to 88.0%.")
    assert finding(table.iloc[:0], "Measured") == "Measured: no runs."
