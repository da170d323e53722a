"""The trial runner's promises about data: validation first, atomic units, resume, refusal.

The engine arm is replaced by a recorder that fabricates a tiny trace (fault injection:
it can raise ``KeyboardInterrupt`` or an error in a chosen unit); the real engine runs in
``artifact/tests/integration/test_trial_cpu.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlfp import paths
from dlfp.trials import runfolder, runner
from dlfp.trials.config import parse_config
from tests.trials.fakes import CONFIG, RAN, manifest


def test_complete_run_layout_and_arm_order(tmp_path, fake) -> None:
    arms = fake()
    out = tmp_path / "run"
    m = runner.run_trials(parse_config(CONFIG), out, progress=False).to_json()  # the manifest as written
    assert m["status"] == "complete" and m["missing"] == []
    assert arms.calls == [False, True, True, False]  # arm order alternates across trials
    for u in m["units"]:
        for name, digest in u["files"].items():
            assert paths.sha256(out / f"trial-{u['trial']}" / u["arm"] / name) == digest
    assert set(m["workloads"]) == {"trial-0/workload.parquet", "trial-1/workload.parquet"}
    assert m["versions"]["vllm"] and m["hardware"]["cpu_logical_cores"]
    assert not list(out.rglob("*.partial")) and not list(out.rglob("steps.jsonl"))
    assert all(u["ran"] == RAN for u in m["units"])  # what each engine reports it ran, per unit


def test_an_arm_with_fewer_trials_runs_only_the_first_of_them_and_loads_as_complete(tmp_path, fake) -> None:
    from dlfp.analysis.runs import load_run

    arms = fake()
    config = parse_config({**CONFIG, "trials": 3, "arms": [{"name": "stock"}, {"name": "dlfp", "dlfp": {}},
                                                           {"name": "few", "dlfp": {"gain": 0.25}, "trials": 1}]})
    assert [config.arms_in(k) for k in range(3)] == [("stock", "dlfp", "few"), ("stock", "dlfp"), ("stock", "dlfp")]
    out = tmp_path / "run"
    m = runner.run_trials(config, out, progress=False).to_json()  # the manifest as written
    assert m["status"] == "complete" and len(m["units"]) == config.unit_count == 7 == len(arms.calls)
    assert [(u["trial"], u["arm"]) for u in m["units"]] == [
        (0, "stock"), (0, "dlfp"), (0, "few"), (1, "dlfp"), (1, "stock"), (2, "stock"), (2, "dlfp")]
    assert not (out / "trial-1" / "few").exists()
    run = load_run(out)
    assert run.trials == [0, 1, 2] and run.trials_of("few") == [0] and run.trials_of("dlfp") == [0, 1, 2]
    good = json.loads((out / "manifest.json").read_text())
    for units in ([u for u in good["units"] if u["arm"] != "few"],  # the arm's one trial lost
                  [*good["units"], {**good["units"][2], "trial": 1}]):  # a trial beyond the arm's own
        (out / "manifest.json").write_text(json.dumps({**good, "units": units}))
        with pytest.raises(runfolder.RunFolderError, match="an arm with its own 'trials', of that many"):
            load_run(out)


def test_interrupt_keeps_finished_units_and_resumes(tmp_path, fake) -> None:
    out = tmp_path / "run"
    fake(fail_at=3, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    m = manifest(out)
    assert m["status"] == "interrupted"
    assert m["missing"] == ["trial-1/dlfp", "trial-1/stock"]
    assert (out / "trial-0" / "stock" / "requests.parquet").exists()
    kept = (out / "trial-0" / "dlfp" / "tokens.parquet").read_bytes()
    arms = fake()
    m = runner.run_trials(parse_config(CONFIG), out, progress=False).to_json()  # the manifest as written
    assert m["status"] == "complete" and arms.calls == [True, False]  # only the missing units
    assert (out / "trial-0" / "dlfp" / "tokens.parquet").read_bytes() == kept


def test_failure_is_recorded(tmp_path, fake) -> None:
    fake(fail_at=2, fail=RuntimeError("engine died"))
    with pytest.raises(RuntimeError):
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    m = manifest(tmp_path / "run")
    assert m["status"] == "failed" and "engine died" in m["error"] and len(m["missing"]) == 3


def test_refuses_other_config_or_foreign_folder(tmp_path, fake) -> None:
    fake()
    out = tmp_path / "run"
    runner.run_trials(parse_config(CONFIG), out, progress=False)
    before = (out / runfolder.MANIFEST).read_text()
    with pytest.raises(runfolder.RunFolderError, match="different config"):
        runner.run_trials(parse_config({**CONFIG, "name": "other"}), out, progress=False)
    assert (out / runfolder.MANIFEST).read_text() == before
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(runfolder.RunFolderError, match="not empty"):
        runner.run_trials(parse_config(CONFIG), foreign, progress=False)
    assert runner.run_trials(parse_config(CONFIG), out, progress=False).status == "complete"


@pytest.mark.parametrize(("raw", "needle"), [
    ({"trials": 0}, "'trials' = 0"),
    ({"engine": {"model": "nope"}}, "'engine.model' = 'nope'"),
    ({"engine": {"max_num_seqs": 0}}, "'engine.max_num_seqs' = 0"),
    ({"engine": {"gpu": 1}}, "unknown engine setting(s) ['gpu']"),
    ({"dlfp": {"gain": 9}}, "'gain' = 9"),
    ({"dlfp": {"enabled": True}}, "'dlfp.enabled'"),
    ({"workload": {"rate_rps": -1}}, "rate_rps"),
    ({"slo": {"ttft_ms": 0}}, "'slo.ttft_ms' = 0"),
    ({"seeds": [1, 1, 2]}, "'seeds'"),
    ({"trails": 3}, "unknown config field(s) ['trails']"),
])
def test_bad_config_refused_before_any_work(raw: dict, needle: str, tmp_path, fake) -> None:
    arms = fake()
    with pytest.raises(ValueError) as err:
        runner.run_trials(parse_config(raw), tmp_path / "run", progress=False)
    assert needle in str(err.value)
    assert arms.calls == [] and not (tmp_path / "run").exists()


def test_missing_profile_refused_before_any_arm(tmp_path, fake) -> None:
    arms = fake()
    config = parse_config({**CONFIG, "engine": {"sim": {"profile": str(tmp_path / "none.yaml")}}})
    with pytest.raises(ValueError, match="unknown profile"):
        runner.run_trials(config, tmp_path / "run", progress=False)
    assert arms.calls == []


class _EngineKilledByCtrlC(Exception):
    """What vLLM raises when SIGINT killed the engine core during start-up."""


def test_ctrl_c_reported_as_another_error_is_still_an_interruption(tmp_path, fake, monkeypatch, sigint_raises) -> None:
    import os
    import signal
    import time

    arms = fake()
    real = arms.__call__

    def start_engine_then_ctrl_c(spec, requests, step_log, progress=None, telemetry_interval_s=0.5, warmup=()):
        if len(arms.calls) == 1:  # the second unit: Ctrl-C while its engine starts
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                raise _EngineKilledByCtrlC("Engine core initialization failed") from None
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", start_engine_then_ctrl_c)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    m = manifest(out)
    assert m["status"] == "interrupted" and m.get("error") is None
    assert m["missing"] == ["trial-0/dlfp", "trial-1/dlfp", "trial-1/stock"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


def _unit_config(tmp_path: Path) -> Path:
    import yaml

    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def test_sigterm_is_an_interruption_with_its_own_exit_code(tmp_path, fake, monkeypatch, capsys) -> None:
    """SLURM's time limit and scancel send SIGTERM: handled as Ctrl-C is, exit code 143."""
    import os
    import signal
    import time

    from dlfp.cli import main

    arms = fake()
    real = arms.__call__

    def sigterm_in_second_unit(spec, requests, step_log, progress=None, telemetry_interval_s=0.5, warmup=()):
        if len(arms.calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises long before
            raise AssertionError("SIGTERM was not handled")
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", sigterm_in_second_unit)
    config, out = _unit_config(tmp_path), tmp_path / "run"
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 143
    assert "interrupted (SIGTERM)" in capsys.readouterr().err
    m = manifest(out)
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM" and m.get("error") is None
    assert m["missing"] == ["trial-0/dlfp", "trial-1/dlfp", "trial-1/stock"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    arms = fake()
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 0
    assert arms.calls == [True, True, False] and manifest(out)["status"] == "complete"


def test_dead_engine_core_fails_the_run_with_exit_code_1(tmp_path, fake, capsys) -> None:
    from dlfp.cli import main
    from dlfp.harness.lifeline import EngineCoreDied

    fake(fail_at=2, fail=EngineCoreDied("the engine core process died during the arm"))
    config, out = _unit_config(tmp_path), tmp_path / "run"
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 1
    assert "rerun the same command to resume" in capsys.readouterr().err
    m = manifest(out)
    assert m["status"] == "failed" and m["error"].startswith("EngineCoreDied: ") and m.get("interrupted_by") is None
    assert len(m["missing"]) == 3


REUSE = {**CONFIG, "reuse_engine": True, "arms": [
    {"name": "stock"}, {"name": "stock_fast", "rate_rps": 100.0}, {"name": "dlfp", "dlfp": {}},
    {"name": "dlfp_fast", "dlfp": {}, "rate_rps": 100.0}]}


def test_consecutive_units_of_one_engine_share_it_and_each_replays_at_its_own_rate(tmp_path, fake) -> None:
    """``reuse_engine``: units of one engine configuration that follow each other run on one engine
    (trial 1 starts one arm later, so its stock pair is split), each unit is written as it finishes,
    and an arm with its own rate replays the trial's requests at that rate."""
    arms = fake()
    out = tmp_path / "run"
    done = runner.run_trials(parse_config(REUSE), out, progress=False)
    m = done.to_json()  # the manifest as written
    assert m["status"] == "complete"
    # trial 0: stock pair, dlfp pair; trial 1 (rotated): stock_fast, dlfp pair, stock; each warmed first
    assert arms.engines == [2, 2, 1, 2, 1] and arms.warmups == [3] * 5  # the 3-request workload's first 16
    assert arms.calls == [False, False, True, True, False, True, True, False]
    import pandas as pd

    slow = pd.read_parquet(out / "trial-0" / "stock" / "requests.parquet")
    fast = pd.read_parquet(out / "trial-0" / "stock_fast" / "requests.parquet")
    assert list(fast.prompt_len) == list(slow.prompt_len)
    from dlfp.trials.config import run_config

    base = run_config(done).workload["rate_rps"]  # the design's rate; stock_fast runs at 100 req/s
    assert fast.arrival_s.tolist() == pytest.approx((slow.arrival_s * base / 100.0).tolist())
    assert not list(tmp_path.glob(".*steps.jsonl"))  # the engine's step log beside the folder is gone


def test_an_interrupt_on_a_shared_engine_keeps_the_units_it_finished(tmp_path, fake) -> None:
    fake(fail_at=2, fail=KeyboardInterrupt())
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(REUSE), out, progress=False)
    m = manifest(out)
    assert m["status"] == "interrupted"
    assert [u["arm"] for u in m["units"] if u["status"] == "complete"] == ["stock"]
    arms = fake()
    assert runner.run_trials(parse_config(REUSE), out, progress=False).status == "complete"
    # The resumed trial-0 stock_fast alone (its pair is done), then the dlfp pairs; trial 1's stock units
    # are split by its rotated order, one engine each.
    assert arms.engines == [1, 2, 1, 2, 1] and len(arms.calls) == 7


def test_without_reuse_every_unit_gets_its_own_engine_warmed_first(tmp_path, fake) -> None:
    arms = fake()
    runner.run_trials(parse_config({**REUSE, "reuse_engine": False}), tmp_path / "run", progress=False)
    assert arms.engines == [] and len(arms.calls) == 8  # every unit through run_arm: a fresh engine
    assert arms.warmups == [3] * 8  # each warmed on its workload's first requests, as a shared one is


def test_the_warm_up_and_the_token_ids_kept_follow_the_config(tmp_path, fake) -> None:
    """``warmup_requests``: how many of the workload's first requests warm each engine (0: none);
    ``token_ids: false``: the token tables lose their ids and nothing else (times as microseconds)."""
    import pyarrow.parquet as pq

    arms = fake()
    out = tmp_path / "run"
    runner.run_trials(parse_config({**REUSE, "warmup_requests": 2, "token_ids": False}), out, progress=False)
    assert arms.warmups == [2] * 5
    assert [f.name for f in pq.read_schema(out / "trial-0" / "dlfp" / "tokens.parquet")] == ["request_id", "index",
                                                                                             "t_us"]
    arms = fake()
    runner.run_trials(parse_config({**CONFIG, "warmup_requests": 0}), tmp_path / "cold", progress=False)
    assert arms.warmups == [] and len(arms.calls) == 4
    assert "token_id" in pq.read_schema(tmp_path / "cold" / "trial-0" / "stock" / "tokens.parquet").names
