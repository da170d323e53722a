"""Plain ``sbatch`` scripts for a :class:`~dlfp.cluster.plan.Plan`, submitted as an ``afterok`` chain.

Each job is a small bash script with ``#SBATCH`` lines (name, log, time limit, GPUs, CPUs,
partition, account ...) that activates the environment and runs ``exec python -m dlfp.cli
pipeline ...``: the pipeline is the job's main process, and SLURM ends the job's remaining
processes as soon as that exits. At the time limit or on ``scancel`` SLURM sends SIGTERM to all
of them; the pipeline waits for the notebook kernel to stop its trial and mark the manifest
before it exits (:mod:`dlfp.book.pipeline`). No ``--signal`` or ``--requeue``: the trial runner
already keeps every finished arm on SIGTERM and marks the manifest interrupted, and a
resubmission re-plans from the run folders, so requeueing the same script would add nothing but
a second way to rerun. Dependencies use ``--kill-on-invalid-dep=yes``, so a failed job cancels
its dependents instead of leaving them pending forever. The scripts are kept under the runs
folder (``jobs/<name>.sbatch``) and can be read or resubmitted by hand.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from dlfp.cluster.estimate import slurm_time
from dlfp.cluster.plan import Job, Plan
from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.fields import name, number, refuse_invalid, switch, texts, word
from dlfp.paths import write_json_atomic, write_text_atomic

SUBMISSION = "submission.json"
GPU_REQUESTS = ("gres", "gpus")
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}
SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}")
"""``sbatch --time``'s forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM and D-HH:MM:SS."""
CPUS_PER_GPU = 8
"""Default ``cpus_per_gpu``. SLURM gives a job one CPU unless the site sets ``DefCpuPerGPU``, and a
GPU engine keeps several host processes busy (the trial, the engine core, one worker per TP rank):
on one core they would time each other, not the GPUs."""
CPUS_WITHOUT_GPU = 4
"""CPUs of a job without a GPU (the book job) unless ``cpus_per_task`` is set: papermill's kernels,
the book build, and a modeled study's engine core in its own process."""


@dataclass(frozen=True)
class Slurm:
    """Site settings: where jobs run and in which environment (parameter file ``cluster:`` or options), each
    declared once with its allowed values and meaning (:mod:`dlfp.control.fields`): the check, its message and
    the cluster page's table (:func:`markdown_table`) come from them."""

    partition: str | None = name(None, "The jobs' partition (default: the site's).", nullable=True)
    cpu_partition: str | None = name(None, "The partition of the jobs without a GPU (the book job), for sites "
                                           "that refuse those on a GPU partition; default: partition.", nullable=True)
    account: str | None = name(None, "The account jobs are charged to.", nullable=True)
    gpu_request: str = word("gres", GPU_REQUESTS, "gres: --gres=gpu[:type]:N (every SLURM); gpus: --gpus=[type:]N "
                                                  "(cons_tres).")
    gpu_type: str | None = name(None, "The GPU type in the request (a100, h100 ...); default: any.", nullable=True)
    cpus_per_task: int | None = number(None, "CPUs", 1, 4096, "The same --cpus-per-task for every job instead "
                                       "of cpus_per_gpu per GPU (a CPU target: the cores its trials should have).",
                                       nullable=True, integer=True)
    cpus_per_gpu: int = number(CPUS_PER_GPU, "CPUs", 1, 4096, "A GPU job asks for this many CPUs per GPU: SLURM "
                               "gives one CPU unless the site sets DefCpuPerGPU, and the trial, the engine core and "
                               "one worker per TP rank would then share it; a job without a GPU asks for "
                               f"{CPUS_WITHOUT_GPU}.")
    mem: str | None = name(None, "--mem of every job (default: the site's).", nullable=True)
    time: str | None = name(None, "One time limit for every job instead of the estimates, in a form sbatch --time "
                                  "reads (quoted in YAML: below).", nullable=True)
    exclusive: bool = switch(False, "One job per node, for quiet timing: the generalization jobs otherwise may share "
                                    "a node and its CPUs.")
    python: str | None = name(None, "The jobs' interpreter; default: the one submitting (its environment is the "
                                    "jobs').", nullable=True)
    conda_env: str | None = name(None, "A conda environment (name or prefix) to activate instead of python, e.g. "
                                       "dlfp from environment.yml.", nullable=True)
    setup: tuple[str, ...] = texts("Shell lines before each job's command, e.g. module load cuda.")
    sbatch_args: tuple[str, ...] = texts("Further sbatch options, one per entry.")
    allow_dirty: bool = switch(False, "Let jobs start runs from a working tree whose code differs from its commit "
                                      "(recorded).")

    def __post_init__(self) -> None:
        if self.time is not None:  # first: a YAML time read as a number gets its own explanation
            _check_time(self.time)
        refuse_invalid(self, lambda key, value, allowed: ValueError(f"cluster setting {key!r} = {value!r} is invalid: "
                                                          f"allowed {allowed}"))
        if self.python and self.conda_env:
            raise ValueError("cluster settings 'python' and 'conda_env' exclude each other: name one environment")


def markdown_table() -> str:
    """The site settings as the cluster page's Markdown table (``book/reference/cluster.md`` holds it)."""
    return fields_table(Slurm, "key")


def _check_time(value: object) -> None:
    """Refuse a ``time`` SLURM would misread: YAML reads an unquoted ``8:00:00`` as the base-60
    integer 28800, which ``--time`` takes as minutes (20 days)."""
    if not isinstance(value, str):
        raise ValueError(f"cluster setting 'time' = {value!r} is not text: YAML reads an unquoted time such as "
                         "8:00:00 as a base-60 number (28800), which SLURM would take as minutes; quote it, e.g. "
                         'time: "8:00:00" (or "90" for 90 minutes)')
    if not SLURM_TIME.fullmatch(value):
        raise ValueError(f"cluster setting 'time' = {value!r} is invalid: allowed a time sbatch --time reads, one of "
                         'minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (e.g. "8:00:00", "1-12:00:00")')


def gpu_option(n: int, slurm: Slurm) -> str | None:
    if n <= 0:
        return None
    if slurm.gpu_request == "gpus":
        return f"--gpus={slurm.gpu_type + ':' if slurm.gpu_type else ''}{n}"
    return f"--gres=gpu:{slurm.gpu_type + ':' if slurm.gpu_type else ''}{n}"


def cpus(job: Job, slurm: Slurm) -> int:
    """``--cpus-per-task`` of ``job``: ``cpus_per_task`` when set, else by its GPUs."""
    if slurm.cpus_per_task:
        return slurm.cpus_per_task
    return slurm.cpus_per_gpu * job.gpus if job.gpus > 0 else CPUS_WITHOUT_GPU


def partition(job: Job, slurm: Slurm) -> str | None:
    """The partition of ``job`` (None: the site's default): ``cpu_partition`` for a job without a GPU."""
    return (slurm.cpu_partition if job.gpus <= 0 else None) or slurm.partition


def directives(job: Job, slurm: Slurm, root: Path) -> list[str]:
    """The job's ``sbatch`` options, one per ``#SBATCH`` line."""
    opts = [f"--job-name=dlfp-{job.name}", f"--output={job.log}", f"--chdir={root}", "--nodes=1", "--ntasks=1",
            f"--time={slurm.time or slurm_time(job.limit_s)}"]
    opts += [o for o in (gpu_option(job.gpus, slurm),) if o]
    opts += [f"--partition={p}" for p in (partition(job, slurm),) if p]
    opts += [f"--account={slurm.account}"] if slurm.account else []
    opts.append(f"--cpus-per-task={cpus(job, slurm)}")
    opts += [f"--mem={slurm.mem}"] if slurm.mem else []
    opts += ["--exclusive"] if slurm.exclusive else []
    return opts + list(slurm.sbatch_args)


def command(job: Job, slurm: Slurm) -> list[str]:
    python = "python" if slurm.conda_env else (slurm.python or sys.executable)
    return [python, "-m", "dlfp.cli", "pipeline", *job.pipeline_args]


def script(job: Job, slurm: Slurm, root: Path) -> str:
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in directives(job, slurm, root)),
             f"# dlfp cluster job {job.name}: notebooks {', '.join(job.notebooks)}; {job.gpus} GPU(s)",
             *(f"# estimate: {b}" for b in job.basis),
             "set -euo pipefail"]
    if slurm.conda_env:
        lines += ['eval "$(conda shell.bash hook)"', f"conda activate {shlex.quote(slurm.conda_env)}"]
    lines += list(slurm.setup)
    if slurm.allow_dirty:
        lines.append("export DLFP_ALLOW_DIRTY=1")
    lines += ['echo "[dlfp-cluster] job ${SLURM_JOB_ID:-?} ' + job.name + ' on $(hostname) at $(date -Is)"',
              "exec " + shlex.join(command(job, slurm))]
    return "\n".join(lines) + "\n"


def run_command(args: Sequence[str]) -> str:
    """A SLURM client command's standard output; a failure raises with its message."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def queued(runs: Path) -> dict[str, str]:
    """Jobs of the last submission into ``runs`` still in the queue: name -> 'id STATE'."""
    path = runs / "jobs" / SUBMISSION
    if not path.is_file():
        return {}
    last = json.loads(path.read_text(encoding="utf-8"))
    ids = {str(j["id"]): j["name"] for j in last.get("jobs", [])}
    if not ids:
        return {}
    out = run_command(["squeue", "-h", "--me", "-o", "%i %T"])  # -j would fail once the old ids are purged
    states = dict(line.split() for line in out.splitlines() if line.strip())
    return {ids[i]: f"{i} {s}" for i, s in states.items() if i in ids and s in ACTIVE_STATES}


def submit(plan: Plan, slurm: Slurm, root: Path) -> dict[str, str]:
    """Write every job's script and submit the chain; returns job name -> SLURM job id.

    A job waits (``afterok``) for the jobs it names. If one ``sbatch`` fails, the jobs already
    submitted are cancelled, so no half chain runs; the scripts stay for inspection.
    """
    busy = queued(plan.runs_root)
    if busy:
        raise RuntimeError(f"jobs of the previous submission into {plan.runs_root} are still queued or running "
                           f"({', '.join(f'{n}: {s}' for n, s in busy.items())}); wait for them or scancel them, "
                           "then resubmit")
    jobs_dir = plan.runs_root / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    ids: dict[str, str] = {}
    try:
        for job in plan.jobs:
            job.log.parent.mkdir(parents=True, exist_ok=True)
            path = jobs_dir / f"{job.name}.sbatch"
            write_text_atomic(path, script(job, slurm, root))
            deps = [ids[name] for name in job.after]
            args = ["sbatch", "--parsable", "--kill-on-invalid-dep=yes",
                    *([f"--dependency=afterok:{':'.join(deps)}"] if deps else []), str(path)]
            ids[job.name] = run_command(args).strip().split(";")[0]
    except BaseException:
        if ids:
            subprocess.run(["scancel", *ids.values()], capture_output=True, timeout=120)
        raise
    write_json_atomic(jobs_dir / SUBMISSION, {
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "slurm": asdict(slurm),
        "jobs": [{"name": j.name, "id": ids[j.name], "after": list(j.after), "gpus": j.gpus, "cpus": cpus(j, slurm),
                  "partition": partition(j, slurm), "time_limit": slurm.time or slurm_time(j.limit_s),
                  "log": str(j.log).replace("%j", ids[j.name])} for j in plan.jobs],
        "skipped": [{"name": n, "reason": r} for n, r in plan.skipped]})
    return ids
