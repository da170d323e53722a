"""``dlfp study``: its arguments, the plan it lists and runs, and what it refuses before any work."""

from __future__ import annotations

import re

import pytest

from dlfp.studies import command, plans
from dlfp.trials.schema import Manifest


def test_only_names_an_unknown_entry() -> None:
    with pytest.raises(ValueError, match="not in the baselines plan"):
        command.main(["baselines", "--out", "/nonexistent", "--only", "gpu-qwen3-9b", "--list"])


def test_list_names_every_arm(capsys: pytest.CaptureFixture[str]) -> None:
    """The capacity study's 161 arms once made its start line a screenful; --list is where they all are."""
    assert command.main(["capacity", "--out", "/nonexistent", "--only", "a100-qwen3-0.6b", "--list"]) == 0
    listed = capsys.readouterr().err
    assert listed.count("stock_0.3") == 1 and "dlfp-slo.relaxed_1.2" in listed and "more" not in listed


def test_a_run_names_a_few_arms(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dlfp.trials import runner

    done = Manifest(status="complete", config={}, units=[])
    monkeypatch.setattr(runner, "run_trials", lambda cfg, out, allow_dirty, workers: done)
    assert command.main(["baselines", "--out", "/nonexistent", "--only", "cpu-tiny"]) == 0
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
    assert command.main(["stability", "--out", "/nonexistent", "--times", "7", "--list"]) == 0
    assert capsys.readouterr().err.count("/nonexistent/rep-") == 7
    with pytest.raises(ValueError, match="at least 5 repetitions"):
        command.main(["stability", "--out", "/nonexistent", "--times", "3", "--list"])
    with pytest.raises(ValueError, match="--times belongs to the stability study"):
        command.main(["baselines", "--out", "/nonexistent", "--times", "7", "--list"])
    quick = plans.stability(trials=2, requests=20, times=1)
    assert len(quick[0][1].seeds) == 2 and quick[0][1].workload["n_requests"] == 20


@pytest.mark.parametrize(("argv", "message"), [
    (["baselines", "--goal-trials", "10"], "--goal-trials belongs to the capacity study, not to baselines"),
    (["stability", "--goal-trials", "10"], "--goal-trials belongs to the capacity study, not to stability"),
    (["capacity", "--trials", "5", "--goal-trials", "4"], "--goal-trials 4: allowed an integer from the run's "
                                                          "trials (5) to 1000"),
])
def test_goal_trials_are_refused_outside_the_capacity_study_or_below_its_trials(argv: list[str],
                                                                              message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        command.main([*argv, "--out", "/nonexistent", "--list"])


def test_skip_measured_leaves_the_cpu_engine_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(["capacity", "--out", "/nonexistent", "--clock", "virtual", "--skip-measured", "--list"]) == 0
    listed = capsys.readouterr().err
    assert "cpu-tiny" not in listed and "a100-qwen3-32b" in listed and "h200-qwen3-8b-field" in listed
