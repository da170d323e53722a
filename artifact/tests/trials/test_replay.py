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
from dlfp.trials.runfolder import RunFolderError, read_manifest
from dlfp.trials.runner import run_trials

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
    recorded = read_manifest(SOURCE)["design"]
    assert manifest["design"]["overrides"] == recorded["overrides"]
    assert manifest["design"]["replayed_from"] == str(SOURCE)
    assert (out / "preflight" / "steps.parquet").read_bytes() == (SOURCE / "preflight" / "steps.parquet").read_bytes()
    done = run_trials(config, out, progress=False, allow_dirty=True, workers=1)
    assert done["status"] == "complete" and "preflight" not in str(done.get("error"))
    real, virtual = load_run(SOURCE, tables=("requests",)), load_run(out, tables=("requests",))
    for k in virtual.trials:
        a = real.tables[(k, "stock")]["requests"].set_index("request_id")
        b = virtual.tables[(k, "stock")]["requests"].set_index("request_id")
        assert a.output_digest.equals(b.output_digest) and a.arrival_s.equals(b.arrival_s)
    again = replay.prepare(SOURCE, out, ["stock"], allow_dirty=True)  # resuming a finished replay changes nothing
    assert again.raw == config.raw and json.loads((out / "manifest.json").read_text())["status"] == "complete"
