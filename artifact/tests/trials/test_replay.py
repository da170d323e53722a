"""A recorded simulated run's units again in virtual time, under its own design (:mod:`dlfp.trials.replay`):
no pre-flight, the same workloads and rates, and the same output tokens as the real-time run (the modeled
executor fabricates them the same way in both modes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlfp.analysis.runs import load_run
from dlfp.paths import REPO_ROOT
from dlfp.trials import replay
from dlfp.trials.runfolder import RunFolderError
from dlfp.trials.runner import run_trials
from dlfp.trials.schema import read_manifest

SOURCE = REPO_ROOT / "data/runs/generalization-sim/a100-qwen3-0.6b-tp1"


def test_the_replay_config_is_the_run_s_on_the_virtual_clock() -> None:
    config = replay.virtual_config(read_manifest(SOURCE), arms=["stock"])
    assert config.engine.virtual and config.arm_names == ("stock",) and config.name.endswith("-virtual")
    with pytest.raises(RunFolderError, match=r"no arm\(s\) \['nope'\]"):
        replay.virtual_config(read_manifest(SOURCE), arms=["nope"])
    with pytest.raises(RunFolderError, match="ran a real model"):
        replay.virtual_config(read_manifest(REPO_ROOT / "data/runs/cpu-default"))


def test_a_replay_keeps_the_design_and_gives_the_real_time_run_s_tokens(tmp_path: Path) -> None:
    out = tmp_path / "replay"
    config = replay.prepare(SOURCE, out, ["stock"], allow_dirty=True)
    manifest = json.loads((out / "manifest.json").read_text())
    recorded = read_manifest(SOURCE).design or {}
    assert manifest["design"]["overrides"] == {k: v for k, v in recorded["overrides"].items() if k != "arms"} | (
        {"arms": [a for a in recorded["overrides"]["arms"] if a["name"] == "stock"]} if "arms" in recorded["overrides"]
        else {})
    assert manifest["design"]["replayed_from"] == str(SOURCE)
    assert (out / "preflight" / "steps.parquet").read_bytes() == (SOURCE / "preflight" / "steps.parquet").read_bytes()
    done = run_trials(config, out, progress=False, allow_dirty=True, workers=1)
    assert done.status == "complete" and "preflight" not in str(done.error)
    real, virtual = load_run(SOURCE, tables=("requests",)), load_run(out, tables=("requests",))
    for k in virtual.trials:
        a = real.tables[(k, "stock")]["requests"].set_index("request_id")
        b = virtual.tables[(k, "stock")]["requests"].set_index("request_id")
        assert a.output_digest.equals(b.output_digest) and a.arrival_s.equals(b.arrival_s)
    again = replay.prepare(SOURCE, out, ["stock"], allow_dirty=True)  # resuming a finished replay changes nothing
    assert again.raw == config.raw and json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_a_replay_of_some_arms_runs_those_arms_as_the_recorded_design_resolved_them(tmp_path: Path) -> None:
    """A capacity run's design resolved every arm (its rate, its requests): the replay keeps the chosen ones,
    so the run read back is the replay's arms, each at the rate the recorded run gave it."""
    from dlfp.trials.config import run_config

    source = REPO_ROOT / "data/runs/study-capacity/a100-qwen3-8b"
    replay.prepare(source, tmp_path / "r", ["stock_0.6", "dlfp-slo.tight_0.9"], allow_dirty=True)
    ran = run_config(read_manifest(tmp_path / "r"))
    assert ran.arm_names == ("stock", "stock_0.6", "dlfp-slo.tight_0.9") and ran.engine.virtual
    recorded = {a.name: a for a in run_config(read_manifest(source)).arms}
    for arm in ran.arms:
        assert (arm.rate_rps, arm.n_requests, arm.dlfp) == (recorded[arm.name].rate_rps,
                                                            recorded[arm.name].n_requests, recorded[arm.name].dlfp)
