"""``dlfp cluster submit``: the notebooks as a chain of SLURM jobs (see :mod:`dlfp.cluster.plan`).

Settings come from the parameter file's ``cluster:`` mapping, then from the command line, which
wins. ``--dry-run`` prints the job list (GPUs, CPUs, partition, time limit, estimate,
dependencies, command, log) and submits nothing; without it the jobs are submitted and their ids
printed. Submitting again re-plans from the run folders: complete runs are skipped, interrupted
ones resume. Both refuse, before anything is queued, what a job would fail on (the plan's
problems, e.g. an interrupted run that started at another commit), and a submission refuses a
tree whose code or parameter files (``params/``) differ from its commit, as the runs would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from dlfp.book.pipeline import load_target
from dlfp.cluster.estimate import FIXED_S, MARGIN, slurm_time
from dlfp.cluster.plan import Layout, Plan, cluster_settings, plan
from dlfp.cluster.sbatch import CPUS_PER_GPU, GPU_REQUESTS, Slurm, command, cpus, gpu_option, partition, submit

PLAN_KEYS = {"gpus", "engine_start_s"}
"""Cluster settings of the plan itself; the rest are :class:`~dlfp.cluster.sbatch.Slurm` fields."""


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def describe(p: Plan, slurm: Slurm, dry_run: bool) -> str:
    """The job list as a reviewer reads it: one row per job, then each job's command and estimate."""
    rows = [("job", "GPUs", "GPU request", "CPUs", "partition", "time limit", "est. work", "est. GPU-h", "after")]
    est_gpu_h = max_gpu_h = 0.0
    for j in p.jobs:
        limit = slurm.time or slurm_time(j.limit_s)
        gpu_h = j.gpus * j.work_s / 3600
        est_gpu_h += gpu_h
        max_gpu_h += j.gpus * j.limit_s / 3600
        everything_before = len(j.after) > 2 and set(j.after) == {i.name for i in p.jobs[:p.jobs.index(j)]}
        rows.append((j.name, str(j.gpus), gpu_option(j.gpus, slurm) or "-", str(cpus(j, slurm)),
                     partition(j, slurm) or "-", limit, f"{j.work_s / 60:.0f} min",
                     f"{gpu_h:.2f}" if j.gpus else "-",
                     "all jobs above" if everything_before else ", ".join(j.after) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [f"dlfp cluster submit: {len(p.jobs)} job(s), runs in {_shown(p.runs_root)}, book in {_shown(p.book_dir)}"
           + (" (dry run: nothing submitted)" if dry_run else "")]
    out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    out.append(f"  expected {est_gpu_h:.2f} GPU-hours; at most {max_gpu_h:.2f} (GPUs x time limits). Time limit = "
               f"estimated work x {MARGIN} + {FIXED_S / 60:.0f} min, in whole minutes"
               + (f" (overridden: {slurm.time})" if slurm.time else ""))
    out += [f"  skipped {name}: {why}" for name, why in p.skipped]
    out += [f"  note: {n}" for n in p.notes]
    out += [f"  PROBLEM: {n}" for n in p.problems]
    out.append(f"each job: sbatch --dependency=afterok:<its 'after' jobs> {_shown(p.runs_root / 'jobs')}/<job>.sbatch")
    for j in p.jobs:
        out.append(f"  {j.name}: {' '.join(command(j, slurm))}")
        out.append(f"    log: {_shown(j.log)}")
        out += [f"    estimate: {b}" for b in j.basis]
    return "\n".join(out)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlfp cluster submit", description=__doc__)
    ap.add_argument("--params", type=Path, required=True, help="a target's parameter file, e.g. params/a100.yaml")
    ap.add_argument("--runs", type=Path, required=True, help="folder for this submission's run folders and logs")
    ap.add_argument("--sim", type=Path, default=Path("data/runs/generalization-sim"),
                    help="simulated study folder (default: the committed, complete one: nothing reruns)")
    ap.add_argument("--book-dir", type=Path, help="build the book here (default: the repository, as make artifact)")
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: here)")
    ap.add_argument("--reduced", action="store_true", help="the pipeline's reduced parameters (a quick check)")
    ap.add_argument("--dry-run", action="store_true", help="print the job list, submit nothing")
    ap.add_argument("--no-gpus", dest="gpus", action="store_false", default=None,
                    help="request no GPUs (a CPU target, e.g. params/cpu.yaml)")
    ap.add_argument("--engine-start-s", type=float, help="seconds per engine start, for the time estimates")
    ap.add_argument("--partition")
    ap.add_argument("--cpu-partition", help="partition of the jobs without a GPU (default: --partition)")
    ap.add_argument("--account")
    ap.add_argument("--gpu-request", choices=GPU_REQUESTS, help="--gres=gpu:N (default) or --gpus=N")
    ap.add_argument("--gpu-type", help="GPU type in the request, e.g. a100")
    ap.add_argument("--cpus-per-task", type=int, help="CPUs of every job (default: by GPUs, --cpus-per-gpu)")
    ap.add_argument("--cpus-per-gpu", type=int, help=f"CPUs per GPU of a GPU job (default {CPUS_PER_GPU})")
    ap.add_argument("--mem", help="memory per job, e.g. 64G")
    ap.add_argument("--time", help="time limit for every job (e.g. 8:00:00, 1-12:00:00), instead of the estimates")
    ap.add_argument("--exclusive", action="store_true", default=None, help="one job per node (quiet timing)")
    env = ap.add_mutually_exclusive_group()
    env.add_argument("--python", help="the jobs' Python (default: this one)")
    env.add_argument("--conda-env", help="conda environment the jobs activate, e.g. dlfp")
    ap.add_argument("--setup", action="append", help="shell line run before each job's command (repeatable)")
    ap.add_argument("--sbatch-arg", dest="sbatch_args", action="append", help="extra sbatch option (repeatable)")
    ap.add_argument("--allow-dirty", action="store_true", default=None,
                    help="let jobs start runs from a tree whose code differs from its commit (recorded)")
    return ap


def settings(args: argparse.Namespace) -> tuple[dict[str, Any], Slurm]:
    """(plan settings, SLURM settings): the parameter file's ``cluster`` mapping under the options."""
    slurm_keys = {f.name for f in fields(Slurm)}
    merged = cluster_settings(load_target(args.params), slurm_keys | PLAN_KEYS)
    merged.update({k: v for k, v in vars(args).items() if k in slurm_keys | PLAN_KEYS and v is not None})
    return ({k: merged.pop(k) for k in PLAN_KEYS if k in merged},
            Slurm(**{k: v for k, v in merged.items() if k in slurm_keys}))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = args.root.resolve()
    plan_settings, slurm = settings(args)
    gpus = plan_settings.get("gpus", True)
    if not isinstance(gpus, bool):
        raise ValueError(f"cluster setting 'gpus' = {gpus!r} is invalid: allowed true or false")
    layout = Layout(root=root, params=args.params.resolve(), runs=args.runs.resolve(), sim=args.sim.resolve(),
                    book_dir=(args.book_dir or root).resolve(), reduced=args.reduced)
    p = plan(layout, gpus=gpus, engine_start_s=plan_settings.get("engine_start_s"), allow_dirty=slurm.allow_dirty)
    print(describe(p, slurm, args.dry_run))
    if p.problems:
        raise ValueError(f"{len(p.problems)} problem(s) would make jobs fail (listed above); nothing submitted")
    if args.dry_run:
        return 0
    if shutil.which("sbatch") is None:
        raise FileNotFoundError("sbatch is not on PATH: submit from a SLURM login node (--dry-run shows the jobs)")
    if any(j.runs for j in p.jobs):  # a job that measures must be allowed to start: refuse now, not in the queue
        from dlfp.trials.provenance import start_record

        start_record(slurm.allow_dirty)
    try:
        ids = submit(p, slurm, root)
    except RuntimeError as exc:  # sbatch or squeue said no; nothing of this submission is left queued
        print(f"dlfp cluster: error: {exc}", file=sys.stderr)
        return 1
    print("submitted: " + ", ".join(f"{name} {job_id}" for name, job_id in ids.items()))
    print("follow with: squeue --me; logs as listed above; resubmit the same command to resume", file=sys.stderr)
    return 0
