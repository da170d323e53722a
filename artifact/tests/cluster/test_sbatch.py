"""``dlfp.cluster.sbatch``: the script of a :class:`~dlfp.cluster.plan.Job` (its ``#SBATCH`` lines:
name, log, time limit from the estimate or a ``time`` setting as ``sbatch`` reads it, one GPU per TP
rank as ``--gres`` or ``--gpus``, CPUs by GPUs, the CPU partition for a job without a GPU, site
settings; then the environment and ``exec`` of the pipeline, without ``--signal`` or ``--requeue``),
and the submission of a plan as an ``afterok`` chain with ``--kill-on-invalid-dep=yes`` that cancels
what it submitted when one ``sbatch`` fails.

Nothing reaches SLURM: ``sbatch``, ``squeue`` and ``scancel`` are replaced by recorders
(``tests/integration/test_slurm.py`` submits to a real one). ``tests/cluster/test_plan.py`` already
checks the GPU lines of the A100 plan's jobs.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlfp.cluster import sbatch
from dlfp.cluster.estimate import limit_s, slurm_time
from dlfp.cluster.plan import Job, Plan
from dlfp.cluster.sbatch import (
    CPUS_PER_GPU,
    CPUS_WITHOUT_GPU,
    GPU_REQUESTS,
    SUBMISSION,
    Slurm,
    directives,
    gpu_option,
    script,
    submit,
)

ROOT = Path("/srv/dlfp")


def job(name: str = "gen-qwen3-8b-tp2", gpus: int = 2, after: tuple[str, ...] = (), work_s: float = 1000.0,
        log: Path = Path("/scratch/runs/generalization/qwen3-8b-tp2.%j.log")) -> Job:
    return Job(name=name, notebooks=("02_generalization",),
               pipeline_args=("--root", str(ROOT), "--only", "02_generalization", "--models", "qwen3-8b",
                              "--tensor-parallel-sizes", str(gpus), "--notebooks-out", "/scratch/runs/jobs/x y"),
               gpus=gpus, work_s=work_s, basis=("qwen3-8b-tp2: 6 arm(s) x (180 s start + 25 s load)",
                                                "simulated a100-qwen3-0.6b-tp1: 6 arm(s)"),
               log=log, after=after)


def sbatch_lines(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH ")]


# gpu_option

@pytest.mark.parametrize(("n", "slurm", "option"), [
    (0, Slurm(), None), (-1, Slurm(gpu_request="gpus"), None),
    (1, Slurm(), "--gres=gpu:1"), (2, Slurm(gpu_type="a100"), "--gres=gpu:a100:2"),
    (1, Slurm(gpu_request="gpus"), "--gpus=1"), (4, Slurm(gpu_request="gpus", gpu_type="h100"), "--gpus=h100:4"),
])
def test_gpu_option(n: int, slurm: Slurm, option: str | None) -> None:
    assert gpu_option(n, slurm) == option


def test_the_gpu_request_kinds() -> None:
    assert GPU_REQUESTS == ("gres", "gpus") and Slurm().gpu_request == "gres"


# directives and script

def test_the_sbatch_lines_of_a_job() -> None:
    j = job()
    assert directives(j, Slurm(), ROOT) == [
        "--job-name=dlfp-gen-qwen3-8b-tp2", f"--output={j.log}", f"--chdir={ROOT}", "--nodes=1", "--ntasks=1",
        f"--time={slurm_time(limit_s(1000.0))}", "--gres=gpu:2", "--cpus-per-task=16"]
    assert slurm_time(limit_s(1000.0)) == "00:35:00"  # 1000 s x 1.5 + 600 s, in whole minutes


def test_one_gpu_per_tensor_parallel_rank_and_none_for_cpu_jobs() -> None:
    for tp in (1, 2, 4):
        assert f"--gres=gpu:{tp}" in directives(job(gpus=tp), Slurm(), ROOT)
    assert not [o for o in directives(job(gpus=0), Slurm(gpu_type="a100"), ROOT) if "gpu" in o]


@pytest.mark.parametrize(("gpus", "slurm", "n"), [
    (1, Slurm(), CPUS_PER_GPU), (2, Slurm(), 2 * CPUS_PER_GPU), (0, Slurm(), CPUS_WITHOUT_GPU),
    (2, Slurm(cpus_per_gpu=6), 12), (0, Slurm(cpus_per_gpu=6), CPUS_WITHOUT_GPU),
    (2, Slurm(cpus_per_task=3), 3), (0, Slurm(cpus_per_task=3), 3),
])
def test_every_job_asks_for_cpus_by_its_gpus_unless_told(gpus: int, slurm: Slurm, n: int) -> None:
    """Without DefCpuPerGPU a site gives one CPU: a TP=2 engine's processes would share it."""
    assert (CPUS_PER_GPU, CPUS_WITHOUT_GPU) == (8, 4)
    assert [o for o in directives(job(gpus=gpus), slurm, ROOT) if o.startswith("--cpus")] == [f"--cpus-per-task={n}"]


@pytest.mark.parametrize(("slurm", "gpu_job", "cpu_job"), [
    (Slurm(), None, None), (Slurm(partition="gpu"), "gpu", "gpu"),
    (Slurm(partition="gpu", cpu_partition="cpu"), "gpu", "cpu"), (Slurm(cpu_partition="cpu"), None, "cpu"),
])
def test_a_job_without_a_gpu_goes_to_the_cpu_partition_when_one_is_set(slurm: Slurm, gpu_job: str | None,
                                                                       cpu_job: str | None) -> None:
    def part(gpus: int) -> list[str]:
        return [o for o in directives(job(gpus=gpus), slurm, ROOT) if o.startswith("--partition")]

    assert part(2) == ([f"--partition={gpu_job}"] if gpu_job else [])
    assert part(0) == ([f"--partition={cpu_job}"] if cpu_job else [])


@pytest.mark.parametrize("time", ["90", "30:00", "8:00:00", "08:00:00", "2-0", "1-12:30", "1-12:30:00"])
def test_every_sbatch_time_form_is_taken_as_written(time: str) -> None:
    assert f"--time={time}" in directives(job(), Slurm(time=time), ROOT)


def test_an_unquoted_yaml_time_is_refused_with_the_fix() -> None:
    """YAML 1.1 reads 8:00:00 as the base-60 integer 28800; as --time=28800 SLURM would allow 20 days."""
    value = yaml.safe_load("time: 8:00:00")["time"]
    assert value == 28800
    with pytest.raises(ValueError, match=r"'time' = 28800 is not text.*quote it, e\.g\. time: \"8:00:00\""):
        Slurm(time=value)


@pytest.mark.parametrize("time", ["8h", "8:00:00:00", "1-", "-8:00", "8:00 ", "", "1.5", "1-2-3"])
def test_a_time_sbatch_would_not_read_is_refused(time: str) -> None:
    with pytest.raises(ValueError, match="allowed a time sbatch --time reads"):
        Slurm(time=time)


def test_site_settings_become_sbatch_lines_in_order() -> None:
    slurm = Slurm(partition="gpu", account="proj42", gpu_request="gpus", gpu_type="a100", cpus_per_task=16,
                  mem="200G", time="12:00:00", exclusive=True, sbatch_args=("--qos=high", "--constraint=nvlink"))
    assert directives(job(), slurm, ROOT)[5:] == [
        "--time=12:00:00", "--gpus=a100:2", "--partition=gpu", "--account=proj42", "--cpus-per-task=16",
        "--mem=200G", "--exclusive", "--qos=high", "--constraint=nvlink"]


def test_the_script_text() -> None:
    j = job(after=("trials",))
    text = script(j, Slurm(), ROOT)
    lines = text.splitlines()
    assert text.endswith("\n") and lines[0] == "#!/bin/bash"
    n = len(directives(j, Slurm(), ROOT))
    assert lines[1:n + 1] == [f"#SBATCH {o}" for o in directives(j, Slurm(), ROOT)]
    assert lines[n + 1] == "# dlfp cluster job gen-qwen3-8b-tp2: notebooks 02_generalization; 2 GPU(s)"
    assert lines[n + 2:n + 4] == [f"# estimate: {b}" for b in j.basis]
    assert lines[n + 4] == "set -euo pipefail"
    assert lines[-2] == ('echo "[dlfp-cluster] job ${SLURM_JOB_ID:-?} gen-qwen3-8b-tp2 on $(hostname) at '
                         '$(date -Is)"')
    assert lines[-1].startswith("exec ")
    assert shlex.split(lines[-1]) == ["exec", sys.executable, "-m", "dlfp.cli", "pipeline", *j.pipeline_args]
    # SIGTERM at the time limit is the pipeline's to handle; a resubmission replans: no requeue
    assert "--signal" not in text and "--requeue" not in text
    assert "afterok" not in text  # dependencies are sbatch options at submission


def test_the_jobs_environment() -> None:
    python = script(job(), Slurm(python="/opt/py/bin/python", setup=("module load cuda/12.4",), allow_dirty=True),
                    ROOT).splitlines()
    assert python[-1].startswith("exec /opt/py/bin/python -m dlfp.cli pipeline ")
    assert python.index("module load cuda/12.4") < python.index("export DLFP_ALLOW_DIRTY=1") < len(python) - 2
    conda = script(job(), Slurm(conda_env="my env"), ROOT).splitlines()
    assert conda[conda.index("set -euo pipefail") + 1:][:2] == ['eval "$(conda shell.bash hook)"',
                                                                 "conda activate 'my env'"]
    assert conda[-1].startswith("exec python -m dlfp.cli pipeline ")
    assert "DLFP_ALLOW_DIRTY" not in script(job(), Slurm(), ROOT)


@pytest.mark.parametrize(("settings", "named"), [
    ({"python": "/opt/py", "conda_env": "dlfp"}, "'python' and 'conda_env' exclude each other"),
    ({"cpus_per_task": 0}, "'cpus_per_task' = 0"), ({"cpus_per_task": True}, "'cpus_per_task' = True"),
    ({"cpus_per_gpu": 0}, "'cpus_per_gpu' = 0"), ({"cpus_per_gpu": "8"}, "'cpus_per_gpu' = '8'"),
])
def test_contradictory_settings_are_refused(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Slurm(**settings)


# submit, against recorders

class FakeSlurm:
    """``sbatch --parsable`` answers ``<id>;<cluster>``; ``squeue`` lists ``queue``; ``scancel`` is noted."""

    def __init__(self, fail_at: int | None = None, queue: str = "") -> None:
        self.sbatch: list[list[str]] = []
        self.scancel: list[list[str]] = []
        self.fail_at = fail_at
        self.queue = queue

    def run(self, args: Sequence[str]) -> str:
        args = list(args)
        if args[0] == "squeue":
            return self.queue
        assert args[0] == "sbatch", args
        if self.fail_at is not None and len(self.sbatch) == self.fail_at:
            raise RuntimeError("sbatch: error: invalid partition")
        self.sbatch.append(args)
        return f"{1000 + len(self.sbatch)};cluster\n"

    def subprocess_run(self, args: Sequence[str], **kwargs: Any) -> Any:
        assert args[0] == "scancel", args
        self.scancel.append(list(args))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(**kw: Any) -> FakeSlurm:
        f = FakeSlurm(**kw)
        monkeypatch.setattr(sbatch, "run_command", f.run)
        monkeypatch.setattr(sbatch.subprocess, "run", f.subprocess_run)
        return f
    return install


def chain(runs: Path) -> Plan:
    jobs = (job("verify", 1, (), log=runs / "verify.%j.log"), job("trials", 1, ("verify",), log=runs / "t.%j.log"),
            job("gen-a", 2, ("trials",), log=runs / "gen" / "a.%j.log"),
            job("gen-b", 2, ("gen-a", "trials"), log=runs / "gen" / "b.%j.log"),
            job("book", 0, ("verify", "trials", "gen-a", "gen-b"), log=runs / "book.%j.log"))
    return Plan(jobs, (("gen-c", "complete"),), runs, runs / "book")


def test_submit_chains_the_jobs_with_afterok(tmp_path: Path, fake) -> None:
    slurm = fake()
    runs = tmp_path / "runs"
    plan = chain(runs)
    ids = submit(plan, Slurm(gpu_type="a100"), ROOT)
    assert ids == {"verify": "1001", "trials": "1002", "gen-a": "1003", "gen-b": "1004", "book": "1005"}
    deps = [None, "afterok:1001", "afterok:1002", "afterok:1003:1002", "afterok:1001:1002:1003:1004"]
    for args, j, dep in zip(slurm.sbatch, plan.jobs, deps, strict=True):
        path = runs / "jobs" / f"{j.name}.sbatch"
        assert args == ["sbatch", "--parsable", "--kill-on-invalid-dep=yes",
                        *([f"--dependency={dep}"] if dep else []), str(path)]
        assert path.read_text() == script(j, Slurm(gpu_type="a100"), ROOT)
        assert j.log.parent.is_dir()
    assert slurm.scancel == []
    record = json.loads((runs / "jobs" / SUBMISSION).read_text())
    assert [(r["name"], r["id"], r["after"], r["gpus"]) for r in record["jobs"]] == [
        (j.name, ids[j.name], list(j.after), j.gpus) for j in plan.jobs]
    assert [(r["cpus"], r["partition"]) for r in record["jobs"]] == [(8, None), (8, None), (16, None), (16, None),
                                                                      (4, None)]
    assert record["jobs"][2]["log"] == str(runs / "gen" / "a.1003.log")
    assert record["jobs"][0]["time_limit"] == slurm_time(limit_s(1000.0))
    assert record["skipped"] == [{"name": "gen-c", "reason": "complete"}]
    assert record["slurm"]["gpu_type"] == "a100"


def test_a_failed_sbatch_cancels_the_half_chain(tmp_path: Path, fake) -> None:
    slurm = fake(fail_at=2)
    runs = tmp_path / "runs"
    with pytest.raises(RuntimeError, match="invalid partition"):
        submit(chain(runs), Slurm(), ROOT)
    assert len(slurm.sbatch) == 2 and slurm.scancel == [["scancel", "1001", "1002"]]
    assert not (runs / "jobs" / SUBMISSION).exists()
    assert (runs / "jobs" / "gen-a.sbatch").is_file()  # the scripts stay for inspection


def test_a_previous_submission_still_queued_is_not_submitted_again(tmp_path: Path, fake) -> None:
    runs = tmp_path / "runs"
    fake()
    submit(chain(runs), Slurm(), ROOT)
    slurm = fake(queue="1003 RUNNING\n1005 PENDING\n77 RUNNING\n1001 COMPLETED\n")
    assert sbatch.queued(runs) == {"gen-a": "1003 RUNNING", "book": "1005 PENDING"}
    with pytest.raises(RuntimeError, match=r"still queued or running \(gen-a: 1003 RUNNING, book: 1005 PENDING\)"):
        submit(chain(runs), Slurm(), ROOT)
    assert slurm.sbatch == []
    fake(queue="1001 COMPLETED\n")
    assert sbatch.queued(runs) == {}


def test_nothing_queued_without_a_previous_submission(tmp_path: Path) -> None:
    assert sbatch.queued(tmp_path) == {}  # no squeue call: there is nothing to ask about


@pytest.mark.parametrize(("settings", "key", "allowed"), [
    ({"gpu_request": "gpu"}, "gpu_request", "gres or gpus"),
    ({"cpus_per_task": 0}, "cpus_per_task", r"null or \[1, 4096\]"),
    ({"cpus_per_gpu": True}, "cpus_per_gpu", r"\[1, 4096\]"),
    ({"setup": "module load cuda"}, "setup", "a list of texts"),
    ({"sbatch_args": [3]}, "sbatch_args", "a list of texts"),
    ({"partition": ""}, "partition", "null or a non-empty text"),
    ({"exclusive": "yes"}, "exclusive", "true or false"),
])
def test_a_bad_site_setting_is_refused_by_its_declaration(settings: dict, key: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"cluster setting '{key}' = .* is invalid: allowed {allowed}$"):
        Slurm(**settings)


def test_site_settings_from_yaml_lists_become_tuples_and_counts_ints() -> None:
    s = Slurm(setup=["module load cuda"], sbatch_args=[], cpus_per_task=16.0)
    assert s.setup == ("module load cuda",) and s.sbatch_args == () and type(s.cpus_per_task) is int
    assert hash(s)  # still hashable, as a frozen dataclass of tuples
