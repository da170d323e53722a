"""``dlfp cluster study``: a study's modeled targets in virtual time as one SLURM job array.

A virtual-time study is a set of run folders whose units depend on nothing but their configs
(:mod:`dlfp.sim.virtual`), so a cluster runs them side by side: one array task per run folder
(``dlfp study <name> --clock virtual --only <folder>``), each on ``--cpus-per-task`` worker processes
(:mod:`dlfp.trials.parallel`), then, for the capacity study, one job after the whole array that writes
its tables (``afterok``: only when every task succeeded). Measured targets (the CPU engine) are not
run here: they measure a machine, and an array task shares its node with others.

A task that is cancelled or hits its time limit leaves its folder's finished units and a manifest that
says what is missing; submitting again resumes every folder (a complete one does nothing). The scripts
are kept in ``<out>/jobs/`` beside the logs. ``--dry-run`` prints the scripts and submits nothing.
"""

from __future__ import annotations

import argparse
import math
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from dlfp.cluster.estimate import slurm_time
from dlfp.cluster.sbatch import Slurm, run_command
from dlfp.paths import write_text_atomic

UNIT_S = 3.0
"""Seconds of one worker per virtual unit, for the time limit: a capacity unit on a 2-core AMD EPYC took
1-3 s (``dlfp bench virtual speed``); a site's cores are rarely slower."""
START_S = 600.0
"""Per task, on top: importing vLLM, the pre-flight and the worker pool's start."""


def entries(study: str, trials: int, requests: int | None, only: Sequence[str] | None,
            goal_trials: int | None = None) -> list[tuple[str, int]]:
    """The study's modeled run folders (measured ones dropped) and their units, in plan order."""
    from dlfp.studies.command import study_plan
    from dlfp.studies.plans import STABILITY_TIMES, with_clock
    from dlfp.trials.config import parse_config

    asked = argparse.Namespace(study=study, trials=trials, requests=requests, goal_trials=goal_trials,
                               times=STABILITY_TIMES)
    plan = [(str(d), parse_config(with_clock(c.raw, "virtual"))) for d, c in study_plan(asked)]
    unknown = sorted(set(only or ()) - {d for d, _ in plan})
    if unknown:
        raise ValueError(f"--only {unknown}: not in the {study} plan {[d for d, _ in plan]}")
    return [(d, c.unit_count) for d, c in plan
            if c.engine.virtual and (not only or d in only)]


def scripts(study: str, folders: Sequence[tuple[str, int]], out: Path, trials: int, requests: int | None,
            slurm: Slurm, root: Path, goal_trials: int | None = None) -> dict[str, str]:
    """The array's script and, for the capacity study, the tables job's: name -> text."""
    python = "python" if slurm.conda_env else (slurm.python or sys.executable)
    cpus = slurm.cpus_per_task or 4
    longest = max(units for _, units in folders)
    limit = slurm.time or slurm_time(START_S + math.ceil(longest / cpus) * UNIT_S * 2)

    def options(cpus: int, time: str) -> list[str]:
        opts = [f"--chdir={root}", "--nodes=1", "--ntasks=1", f"--cpus-per-task={cpus}", f"--time={time}"]
        opts += [f"--partition={p}" for p in (slurm.cpu_partition or slurm.partition,) if p]
        opts += [f"--account={slurm.account}"] if slurm.account else []
        opts += [f"--mem={slurm.mem}"] if slurm.mem else []
        return [f"#SBATCH {o}" for o in (*opts, *slurm.sbatch_args)]

    env = (['eval "$(conda shell.bash hook)"', f"conda activate {shlex.quote(slurm.conda_env)}"]
           if slurm.conda_env else []) + [*slurm.setup, *(["export DLFP_ALLOW_DIRTY=1"] if slurm.allow_dirty else [])]
    study_cmd = [python, "-m", "dlfp.cli", "study", study, "--clock", "virtual", "--out", str(out),
                 "--trials", str(trials), *(["--requests", str(requests)] if requests else []),
                 *(["--goal-trials", str(goal_trials)] if goal_trials else []), "--no-tables"]
    array = ["#!/bin/bash", f"#SBATCH --job-name=dlfp-{study}-virtual", f"#SBATCH --array=0-{len(folders) - 1}",
             f"#SBATCH --output={out}/jobs/{study}-%a-%A.log", *options(cpus, limit),
             f"# dlfp cluster study {study}: one task per run folder, in virtual time", "set -euo pipefail", *env,
             f"FOLDERS=({' '.join(shlex.quote(d) for d, _ in folders)})",
             'FOLDER="${FOLDERS[$SLURM_ARRAY_TASK_ID]}"',
             'echo "[dlfp-cluster] task $SLURM_ARRAY_TASK_ID of job ${SLURM_ARRAY_JOB_ID:-?}: $FOLDER on $(hostname)"',
             "exec " + shlex.join(study_cmd) + ' --only "$FOLDER" --workers "${SLURM_CPUS_PER_TASK:-1}"']
    out_scripts = {f"{study}-array": "\n".join(array) + "\n"}
    if study == "capacity":  # the tables read every folder: one job after the whole array
        tables = ["#!/bin/bash", f"#SBATCH --job-name=dlfp-{study}-tables",
                  f"#SBATCH --output={out}/jobs/tables-%j.log",
                  *options(1, "1:00:00"), "set -euo pipefail", *env,
                  "exec " + shlex.join([python, "-m", "dlfp.cli", "study", "capacity", "--tables", "--out", str(out)])]
        out_scripts[f"{study}-tables"] = "\n".join(tables) + "\n"
    return out_scripts


def submit(texts: dict[str, str], out: Path) -> dict[str, str]:
    """Write the scripts under ``<out>/jobs`` and submit the array, then the tables job after it; returns
    name -> job id. A failed second submission cancels the array (no half study runs unseen)."""
    jobs = out / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    ids: dict[str, str] = {}
    try:
        for name, text in texts.items():
            path = jobs / f"{name}.sbatch"
            write_text_atomic(path, text)
            deps = [f"--dependency=afterok:{i}" for i in ids.values()]
            done = run_command(["sbatch", "--parsable", "--kill-on-invalid-dep=yes", *deps, str(path)])
            ids[name] = done.strip().split(";")[0]
    except BaseException:
        if ids:
            run_command(["scancel", *ids.values()])
        raise
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    from dlfp.studies.command import study_arguments

    ap = argparse.ArgumentParser(prog="dlfp cluster study", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    study_arguments(ap)
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: here)")
    ap.add_argument("--partition")
    ap.add_argument("--account")
    ap.add_argument("--cpus-per-task", type=int, default=None, help="worker processes per task (default 4)")
    ap.add_argument("--mem")
    ap.add_argument("--time", help="time limit of each task (default: from the units, UNIT_S each)")
    env = ap.add_mutually_exclusive_group()
    env.add_argument("--python", help="the jobs' Python (default: this one)")
    env.add_argument("--conda-env")
    ap.add_argument("--setup", action="append", default=[], help="shell line before each command (repeatable)")
    ap.add_argument("--sbatch-arg", dest="sbatch_args", action="append", default=[])
    ap.add_argument("--allow-dirty", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="print the scripts, submit nothing")
    args = ap.parse_args(argv)
    slurm = Slurm(partition=args.partition, account=args.account, cpus_per_task=args.cpus_per_task, mem=args.mem,
                  time=args.time, python=args.python, conda_env=args.conda_env, setup=tuple(args.setup),
                  sbatch_args=tuple(args.sbatch_args), allow_dirty=args.allow_dirty)
    if args.trials is None:
        from dlfp.studies.plans import TRIALS

        args.trials = TRIALS
    folders = entries(args.study, args.trials, args.requests, args.only, args.goal_trials)
    if not folders:
        raise ValueError(f"the {args.study} plan has no modeled run folder{' among --only' if args.only else ''}")
    out = args.out.resolve()
    texts = scripts(args.study, folders, out, args.trials, args.requests, slurm, args.root.resolve(), args.goal_trials)
    print(f"dlfp cluster study {args.study}: {len(folders)} array task(s), "
          f"{', '.join(f'{d} ({u} units)' for d, u in folders)}, into {out}"
          + (" (dry run: nothing submitted)" if args.dry_run else ""))
    if args.dry_run:
        for name, text in texts.items():
            print(f"--- {name}.sbatch\n{text}", end="")
        return 0
    if shutil.which("sbatch") is None:
        raise FileNotFoundError("sbatch is not on PATH: submit from a SLURM login node (--dry-run shows the scripts)")
    if not args.allow_dirty:
        from dlfp.trials.provenance import start_record

        start_record(False)  # a dirty tree is refused now, not in every task
    ids = submit(texts, out)
    print("submitted: " + ", ".join(f"{n} {i}" for n, i in ids.items()))
    return 0
