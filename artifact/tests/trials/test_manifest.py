"""What a run manifest records and how a folder is opened (``dlfp.trials.manifest``)."""

from __future__ import annotations

import pytest

from dlfp import paths
from dlfp.trials import runfolder, runner
from dlfp.trials.config import parse_config
from dlfp.trials.manifest import exclusive, sim_profile_record
from tests.trials.fakes import CONFIG, manifest


def test_simulated_run_records_its_profile_and_refuses_another_version(tmp_path, fake) -> None:
    from dlfp.sim.costmodel import PROFILE_DIR

    profile = tmp_path / "gpu.yaml"
    profile.write_text((PROFILE_DIR / "a100.yaml").read_text())
    config = parse_config({**CONFIG, "engine": {"sim": {"profile": str(profile)}}})
    out = tmp_path / "run"
    fake(fail_at=2, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(config, out, progress=False)
    record = manifest(out)["sim_profile"]
    assert record["sha256"] == paths.sha256(profile) and record["values"]["compute"]["peak_tflops"]["value"] == 312
    profile.write_text(profile.read_text().replace("value: 0.6,", "value: 0.7,", 1))
    arms = fake()
    with pytest.raises(runfolder.RunFolderError, match="another version of cost profile"):
        runner.run_trials(config, out, progress=False)
    assert arms.calls == []
    shipped = parse_config({**CONFIG, "engine": {"sim": {"profile": "h200"}}})
    assert sim_profile_record(shipped)["file"] == "dlfp/sim/profiles/h200.yaml (shipped)"


def test_a_second_writer_into_the_same_folder_is_refused(tmp_path, fake) -> None:
    fake()
    out = tmp_path / "run"
    with exclusive(out), pytest.raises(runfolder.RunFolderError, match="another dlfp process"):
        runner.run_trials(parse_config(CONFIG), out, progress=False)  # while another job holds the folder
    assert runner.run_trials(parse_config(CONFIG), out, progress=False)["status"] == "complete"
