"""``dlfp cluster submit`` (``dlfp.cluster.submit``): a dry run submits nothing; bad input (an
unquoted time, a run folder its job would refuse, such as an interrupted run that started at
another commit) is refused before any job.
"""

from __future__ import annotations

import json
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


def test_an_unquoted_time_in_the_parameter_file_is_refused_before_anything_is_submitted(tmp_path) -> None:
    from dlfp.cluster.submit import main

    params = tmp_path / "p.yaml"
    params.write_text((ROOT / "params" / "a100.yaml").read_text() + "cluster: {partition: gpu, time: 8:00:00}\n")
    with pytest.raises(ValueError, match="quote it"):
        main(["--params", str(params), "--runs", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()
    quoted = tmp_path / "q.yaml"
    quoted.write_text((ROOT / "params" / "a100.yaml").read_text() + 'cluster: {partition: gpu, time: "8:00:00"}\n')
    assert main(["--params", str(quoted), "--runs", str(tmp_path / "r"), "--sim", str(tmp_path / "s"),
                 "--dry-run"]) == 0


def test_the_dry_run_shows_each_jobs_cpus_and_partition(tmp_path, capsys) -> None:
    from dlfp.cluster.submit import main

    assert main(["--params", str(ROOT / "params" / "a100.yaml"), "--runs", str(tmp_path / "a100"), "--sim",
                 str(tmp_path / "s"), "--dry-run", "--partition", "gpu", "--cpu-partition", "cpu"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:12] if line.strip()}
    assert rows["job"][:5] == ["job", "GPUs", "GPU", "request", "CPUs"] and "partition" in rows["job"]
    assert rows["gen-qwen3-8b-tp2"][1:5] == ["2", "--gres=gpu:2", "16", "gpu"]
    assert rows["book"][1:5] == ["0", "-", "4", "cpu"]


def _unfinished_cpu_run(runs: Path, commit: str) -> Path:
    """The committed CPU paired run, copied into ``runs`` as if interrupted at ``commit``."""
    manifest = json.loads((ROOT / "data" / "runs" / "cpu-default" / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    manifest["git"] = {**manifest["git"], "commit": commit}
    run = runs / manifest["name"]
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _plan_cpu(runs: Path, allow_dirty: bool = False):
    layout = Layout(root=ROOT, params=ROOT / "params" / "cpu.yaml", runs=runs,
                    sim=ROOT / "data" / "runs" / "generalization-sim", book_dir=runs / "book")
    return plan(layout, gpus=False, allow_dirty=allow_dirty)


def test_a_resume_at_another_commit_is_a_problem_before_anything_is_queued(tmp_path, monkeypatch, capsys) -> None:
    """After a timeout, editing and committing the settings moves HEAD: the job resuming the run
    would fail inside its notebook, so the plan says so with the runner's own refusal."""
    from dlfp.cluster.submit import main
    from dlfp.trials import provenance

    head = provenance.git_state()["commit"]
    if head is None:
        pytest.skip("not a git checkout: no commit to compare")
    monkeypatch.delenv(provenance.ALLOW_DIRTY_ENV, raising=False)  # conftest allows dirty trees for the suite
    run = _unfinished_cpu_run(tmp_path / "runs", "0" * 40)
    problems = _plan_cpu(tmp_path / "runs").problems
    assert len(problems) == 1 and problems[0].startswith(f"{run} would fail in its job: refusing to resume: "
                                                         f"this run started at commit 0000000000, the tree is at "
                                                         f"{head[:10]}")
    assert "pass them as options (e.g. --time)" in problems[0]
    with pytest.raises(ValueError, match="problem"):
        main(["--params", str(ROOT / "params" / "cpu.yaml"), "--runs", str(tmp_path / "runs"), "--dry-run"])
    assert f"PROBLEM: {run} would fail in its job" in capsys.readouterr().out
    assert not (tmp_path / "runs" / "jobs").exists()
    assert not _plan_cpu(tmp_path / "runs", allow_dirty=True).problems  # allowed: recorded as a mixed resume


def test_a_resume_at_its_own_commit_is_planned_at_the_rate_its_pre_flight_derived(tmp_path, monkeypatch) -> None:
    from dlfp.trials import provenance

    head = provenance.git_state()["commit"]
    if head is None:
        pytest.skip("not a git checkout: no commit to compare")
    monkeypatch.delenv(provenance.ALLOW_DIRTY_ENV, raising=False)
    _unfinished_cpu_run(tmp_path / "runs", head)
    p = _plan_cpu(tmp_path / "runs")
    trials = next(j for j in p.jobs if j.name == "trials")
    assert not p.problems
    derived = json.loads((ROOT / "data" / "runs" / "cpu-default" / "manifest.json").read_text())["design"]
    rate = derived["overrides"]["workload"]["rate_rps"]
    assert trials.basis[0].endswith(f"at {rate:.3g} req/s, the rate its pre-flight derived"), trials.basis[0]
