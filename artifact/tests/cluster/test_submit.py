"""``dlfp cluster submit`` (``dlfp.cluster.submit``): a dry run submits nothing; bad input is refused before any job.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlfp.cluster.plan import Layout, plan
from dlfp.cluster.sbatch import Slurm
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT


def _plan_a100(tmp_path: Path):
    layout = Layout(root=ROOT, params=ROOT / "params" / "a100.yaml", runs=tmp_path / "a100", sim=tmp_path / "sim",
                    book_dir=tmp_path / "book")
    return plan(layout, gpus=True)


def test_dry_run_prints_the_job_list_and_submits_nothing(tmp_path, capsys) -> None:
    from dlfp.cluster.submit import main

    runs = tmp_path / "a100"
    assert main(["--params", str(ROOT / "params" / "a100.yaml"), "--runs", str(runs), "--sim", str(tmp_path / "s"),
                 "--dry-run", "--partition", "gpu", "--gpu-type", "a100"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing submitted" in out and "expected" in out and "GPU-hours" in out
    assert "--gres=gpu:a100:2" in out and "--partition" not in out  # options go to the scripts, not the table
    assert not runs.exists()  # nothing written


def test_bad_parameters_are_refused_before_anything_is_submitted(tmp_path) -> None:
    from dlfp.cluster.submit import main

    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "params" / "a100.yaml").read_text()),
                                      "models": ["qwen3-0.6b", "no-such-model"]}))
    with pytest.raises(ValueError, match="no-such-model"):
        main(["--params", str(params), "--runs", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()


def test_a_run_folder_of_another_config_is_refused_before_submission(tmp_path) -> None:
    from dlfp.cluster.submit import main
    from dlfp.paths import write_json_atomic
    from dlfp.trials.runfolder import KIND

    trials = next(j for j in _plan_a100(tmp_path).jobs if j.name == "trials")
    trials.runs[0].mkdir(parents=True)
    write_json_atomic(trials.runs[0] / "manifest.json", {"kind": KIND, "status": "complete", "units": [],
                                                          "config": {"name": "something-else"}})
    assert any(str(trials.runs[0]) in problem for problem in _plan_a100(tmp_path).problems)
    with pytest.raises(ValueError, match="problem"):
        main(["--params", str(ROOT / "params" / "a100.yaml"), "--runs", str(tmp_path / "a100"),
              "--sim", str(tmp_path / "sim"), "--book-dir", str(tmp_path / "book")])


def test_cluster_settings_are_validated_by_name(tmp_path) -> None:
    from dlfp.cluster.submit import main

    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "params" / "a100.yaml").read_text()),
                                      "cluster": {"partiton": "gpu"}}))
    with pytest.raises(ValueError, match="partiton"):
        main(["--params", str(params), "--runs", str(tmp_path / "r"), "--dry-run"])
    with pytest.raises(ValueError, match="gpu_request"):
        Slurm(gpu_request="cards")
