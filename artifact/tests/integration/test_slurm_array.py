"""``dlfp cluster study`` against a real single-node SLURM the test starts: a virtual-time study as a job
array, one task per run folder, each on its allocation's CPUs; the folders it fills are the bytes a local
run of the same study gives (virtual time does not depend on where or beside what it runs).

Without a usable SLURM it is skipped, unless ``DLFP_REQUIRE_SLURM=1`` (CI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlfp.paths import REPO_ROOT
from tests.integration.slurm_cluster import single_node_cluster, unavailable, unusable

STUDY = ["baselines", "--trials", "1", "--requests", "20", "--only", "a100-qwen3-8b", "h200-qwen3-8b"]


def _files(folder: Path) -> dict[str, dict[str, str]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest.get("error")
    return {f"{u['trial']}/{u['arm']}": u["files"] for u in manifest["units"]}


@pytest.mark.slow
def test_a_virtual_study_as_a_job_array_gives_the_local_bytes(tmp_path: Path) -> None:
    why = unusable()
    if why:
        unavailable(why)
    out = tmp_path / "array"
    with single_node_cluster(tmp_path / "slurm") as cluster:
        done = subprocess.run([sys.executable, "-m", "dlfp.cli", "cluster", "study", *STUDY, "--out", str(out),
                               "--cpus-per-task", "1", "--time", "0:30:00", "--allow-dirty"], cwd=REPO_ROOT,
                              env=cluster.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 array task(s)" in done.stdout and "submitted: baselines-array" in done.stdout
        cluster.wait_idle()
        jobs = cluster.jobs()
    logs = sorted((out / "jobs").glob("baselines-*.log"))
    assert len(logs) == 2, sorted(p.name for p in (out / "jobs").iterdir())
    assert {log.read_text().split(": ", 1)[1].split(" on ", 1)[0] for log in logs} == {"a100-qwen3-8b", "h200-qwen3-8b"}
    assert all(j["JobState"] == "COMPLETED" for j in jobs.values()), jobs
    local = tmp_path / "local"
    subprocess.run([sys.executable, "-m", "dlfp.cli", "study", *STUDY, "--clock", "virtual", "--out", str(local),
                    "--workers", "1", "--allow-dirty"], cwd=REPO_ROOT, check=True, capture_output=True, timeout=900)
    for folder in ("a100-qwen3-8b", "h200-qwen3-8b"):
        assert _files(out / folder) == _files(local / folder)
