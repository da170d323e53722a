"""``dlfp cluster study``: the job array's scripts (one task per modeled run folder, the capacity tables after
all of them), planned without SLURM; the real queue runs one in ``tests/integration/test_slurm_array.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlfp.cluster import array
from dlfp.cluster.sbatch import Slurm


def test_the_array_has_a_task_per_modeled_folder_and_no_measured_one() -> None:
    folders = array.entries("capacity", 3, None, None)
    names = [d for d, _ in folders]
    assert "cpu-tiny" not in names and "a100-qwen3-32b" in names and "h200-qwen3-8b-field" in names
    from dlfp.studies.plans import capacity_arms

    assert dict(folders)["a100-qwen3-8b"] == 3 * len(capacity_arms("a100-qwen3-8b"))  # every arm and load, 3 trials


def test_goal_trials_reach_each_task_and_its_unit_count() -> None:
    from dlfp.studies.plans import capacity

    folders = dict(array.entries("capacity", 3, None, ["a100-qwen3-8b"], goal_trials=6))
    want = capacity(3, goal_trials=6, targets=("a100-qwen3-8b",))[0][1].unit_count
    assert folders == {"a100-qwen3-8b": want} and want < 6 * len(capacity(3)[1][1].arms)
    task = array.scripts("capacity", list(folders.items()), Path("/out"), 3, None, Slurm(), Path("/repo"),
                         goal_trials=6)["capacity-array"]
    assert "--trials 3 --goal-trials 6 --no-tables" in task


def test_only_narrows_the_array_and_an_unknown_folder_is_refused() -> None:
    assert [d for d, _ in array.entries("baselines", 1, 20, ["a100-qwen3-8b"])] == ["a100-qwen3-8b"]
    with pytest.raises(ValueError, match=r"--only \['nope'\]: not in the baselines plan"):
        array.entries("baselines", 1, 20, ["nope"])


def test_capacity_scripts_run_each_folder_then_the_tables(tmp_path: Path) -> None:
    folders = [("a100-qwen3-8b", 161), ("h200-qwen3-8b", 161)]
    slurm = Slurm(partition="cpu", account="acct", cpus_per_task=8, setup=("module load python",))
    texts = array.scripts("capacity", folders, tmp_path, 3, None, slurm, Path("/repo"))
    task, tables = texts["capacity-array"], texts["capacity-tables"]
    assert "#SBATCH --array=0-1" in task and "#SBATCH --cpus-per-task=8" in task
    assert "#SBATCH --partition=cpu" in task and "#SBATCH --account=acct" in task and "module load python" in task
    assert "FOLDERS=(a100-qwen3-8b h200-qwen3-8b)" in task and '--only "$FOLDER"' in task
    assert "--clock virtual" in task and "--no-tables" in task and '--workers "${SLURM_CPUS_PER_TASK:-1}"' in task
    assert "study capacity --tables --out" in tables and "--cpus-per-task=1" in tables
    assert "#SBATCH --time=" in task and "--time=1:00:00" in tables


def test_a_study_without_tables_is_one_script(tmp_path: Path) -> None:
    texts = array.scripts("baselines", [("a100-qwen3-8b", 19)], tmp_path, 2, 20, Slurm(time="0:20:00"), tmp_path)
    assert list(texts) == ["baselines-array"] and "--time=0:20:00" in texts["baselines-array"]
    assert "--requests 20" in texts["baselines-array"]


def test_a_dry_run_submits_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert array.main(["baselines", "--out", str(tmp_path), "--trials", "1", "--requests", "20", "--only",
                       "a100-qwen3-8b", "h200-qwen3-8b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 array task(s)" in out and "dry run: nothing submitted" in out and not (tmp_path / "jobs").exists()
