"""The job list of a cluster submission: what runs, on how many GPUs, after what, for how long.

Jobs, in dependency order (each waits for the previous stage to succeed, ``afterok``):

1. ``verify``: notebook 00 (the install check, one engine start) into the book;
2. ``trials``: notebook 01, the paired trials, into their run folder;
3. ``gen-<model>-tp<N>``: notebook 02 for one generalization configuration, on ``N`` GPUs;
4. ``book``: notebooks 01 and 02 again over every configuration (all complete: nothing reruns,
   no GPU), then 03 and 04, and the strict book build.

Resubmission re-plans from the run folders: a run whose manifest says ``complete`` gets no job
(an interrupted or failed one is resumed by its job: finished arms are kept), ``verify`` runs
only when something is measured or the book lacks its page, and ``book`` always runs. The
modeled study of notebook 02 (simulated, CPU only) is run by the first generalization job when
it is incomplete, with the other generalization jobs waiting for that one so no two jobs write
one run folder; without generalization jobs the book job runs it.

Every job is ``dlfp pipeline --only ...`` with the notebook parameters the pipeline itself would
pass (:func:`dlfp.book.pipeline.effective_parameters`), so the plan reads the configs the notebooks run.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlfp.book.pipeline import effective_parameters, load_target, notebook_parameters
from dlfp.cluster import estimate
from dlfp.trials.config import TrialConfig
from dlfp.trials.runfolder import MANIFEST, read_manifest

BOOK_NOTEBOOKS = ("01_paired_trials", "02_generalization", "03_results", "04_reproducibility")
JOBS_DIR = "jobs"
"""Under the runs folder: each job's sbatch script, its executed notebooks, and the last submission."""


@dataclass(frozen=True)
class Job:
    """One batch job: ``dlfp pipeline`` with ``pipeline_args``, on ``gpus`` GPUs, after ``after``."""

    name: str
    notebooks: tuple[str, ...]
    pipeline_args: tuple[str, ...]
    gpus: int
    work_s: float
    basis: tuple[str, ...]
    """How ``work_s`` was derived, one line per part."""
    log: Path
    """Log file pattern (``%j``: the SLURM job id), beside the run folder the job fills."""
    after: tuple[str, ...] = ()
    runs: tuple[Path, ...] = ()

    @property
    def limit_s(self) -> float:
        return estimate.limit_s(self.work_s)


@dataclass(frozen=True)
class Plan:
    jobs: tuple[Job, ...]
    skipped: tuple[tuple[str, str], ...]
    """(job name, why it is not submitted)."""
    runs_root: Path
    book_dir: Path
    notes: tuple[str, ...] = field(default=())
    problems: tuple[str, ...] = field(default=())
    """What would make a job fail (e.g. a run folder of another config): submission is refused."""


@dataclass(frozen=True)
class Layout:
    """Where things go: the repository, the parameter file, the run folders, the book."""

    root: Path
    params: Path
    runs: Path
    sim: Path
    book_dir: Path
    reduced: bool = False

    @property
    def generalization(self) -> Path:
        return self.runs / "generalization"

    @property
    def jobs(self) -> Path:
        return self.runs / JOBS_DIR


def _call(fn: Callable[..., Any], values: Mapping[str, Any]) -> Any:
    """``fn`` called as the notebook calls it: each argument is the notebook parameter of its name."""
    return fn(**{name: values[name] for name in inspect.signature(fn).parameters if name in values})


def _state(run_dir: Path, cfg: TrialConfig) -> tuple[bool, list[dict[str, Any]], bool, bool]:
    """(complete, units, started, same config) of a run folder; a foreign or corrupt one is refused by name."""
    from dlfp.trials.manifest import (  # the runner's own comparison, so the plan agrees with it
        normalized_config,
        plan_units,
    )

    if not (run_dir / MANIFEST).is_file():
        return False, plan_units(cfg), False, True
    manifest = read_manifest(run_dir)
    same = normalized_config(manifest["config"]) == normalized_config(cfg.raw)
    return manifest["status"] == "complete", manifest["units"], True, same


class _Planner:
    """The target's notebook parameters and the run folders' state, read once per plan."""

    def __init__(self, layout: Layout, gpus: bool, engine_start_s: float | None) -> None:
        self.layout = layout
        self.gpus = gpus
        self.engine_start_s = engine_start_s
        self.target = load_target(layout.params)
        self.problems: list[str] = []

    def real_start_s(self) -> float:
        if self.engine_start_s is not None:
            return self.engine_start_s
        return estimate.GPU_ENGINE_START_S if self.gpus else estimate.CPU_ENGINE_START_S

    def gpus_for(self, cfg: TrialConfig) -> int:
        return cfg.engine.tensor_parallel_size if self.gpus and cfg.engine.sim is None else 0

    def params(self, run: Path) -> dict[str, dict[str, Any]]:
        lay = self.layout
        return notebook_parameters(str(run), str(lay.generalization), str(lay.sim), lay.reduced)

    def values(self, name: str, params: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return effective_parameters(self.layout.root, name, params, self.target)

    def common_args(self, run: Path) -> tuple[str, ...]:
        lay = self.layout
        return ("--root", str(lay.root), "--params", str(lay.params), "--run", str(run),
                "--gen", str(lay.generalization), "--sim", str(lay.sim), *(("--reduced",) if lay.reduced else ()))

    def cost(self, run_dir: Path, cfg: TrialConfig) -> tuple[bool, estimate.RunCost]:
        """(complete, what is left) of one run folder; one holding another config is a problem of the plan."""
        complete, units, started, same = _state(run_dir, cfg)
        if not same:
            self.problems.append(f"{run_dir} holds a run of another config, which the job would refuse: move it "
                                 "away, regenerate it, or choose another --runs/--sim")
        start = estimate.SIM_ENGINE_START_S if cfg.engine.sim is not None else self.real_start_s()
        return complete, estimate.run_cost(run_dir.name, cfg.workload, units, started, start)

    def measuring_job(self, name: str, notebook: str, run_dir: Path, cfg: TrialConfig, common: tuple[str, ...],
                      selection: tuple[str, ...] = ()) -> Job | None:
        """The job that fills ``run_dir``, or None when it is complete; its notebook goes to ``jobs/<name>/``."""
        complete, cost = self.cost(run_dir, cfg)
        if complete:
            return None
        args = (*common, "--only", notebook, *selection, "--notebooks-out", str(self.layout.jobs / name), "--no-book")
        return Job(name, (notebook,), args, self.gpus_for(cfg), cost.seconds, (cost.describe(),),
                   run_dir.parent / f"{run_dir.name}.%j.log", runs=(run_dir,))


def _paired_config(planner: _Planner) -> TrialConfig:
    from dlfp.book.notebook import config_with_overrides

    p01 = planner.values("01_paired_trials", planner.params(planner.layout.runs / "paired"))
    return config_with_overrides(p01["config"], p01["overrides"])


def _generalization(planner: _Planner, params: dict[str, dict[str, Any]]
                    ) -> tuple[list[tuple[Path, TrialConfig]], list[tuple[Path, TrialConfig]]]:
    from dlfp.book.notebook import generalization_plan, modeled_plan

    p02 = planner.values("02_generalization", params)
    real = _call(generalization_plan, p02)
    modeled = _call(modeled_plan, {**p02, "base_config": p02["modeled_config"], "runs": p02["modeled_runs"],
                                   "out_root": p02["modeled_root"], "overrides": p02["modeled_overrides"]})
    return real, modeled


def plan(layout: Layout, gpus: bool = True, engine_start_s: float | None = None) -> Plan:
    """The jobs still to run for ``layout``; every config is validated here, before any submission.

    Runs in the repository root, where the notebooks run, so relative config paths mean the same.
    """
    with contextlib.chdir(layout.root):
        return _plan(_Planner(layout, gpus, engine_start_s))


def _plan(planner: _Planner) -> Plan:
    layout = planner.layout
    cfg01 = _paired_config(planner)
    run = layout.runs / cfg01.name
    params = planner.params(run)
    common = planner.common_args(run)
    skipped: list[tuple[str, str]] = []

    trials = planner.measuring_job("trials", "01_paired_trials", run, cfg01, common)
    if trials is None:
        skipped.append(("trials", f"{run} is complete"))

    real, modeled = _generalization(planner, params)
    gens: list[Job] = []
    for run_dir, cfg in real:
        selection = ("--models", cfg.engine.model, "--tensor-parallel-sizes", str(cfg.engine.tensor_parallel_size))
        job = planner.measuring_job(f"gen-{run_dir.name}", "02_generalization", run_dir, cfg, common, selection)
        if job is None:
            skipped.append((f"gen-{run_dir.name}", f"{run_dir} is complete"))
        else:
            gens.append(job)

    # The modeled study runs wherever notebook 02 first runs: the first generalization job, else the book job.
    left = [cost for complete, cost in (planner.cost(d, cfg) for d, cfg in modeled) if not complete]
    modeled_s = sum(c.seconds for c in left)
    modeled_basis = tuple(f"simulated {c.describe()}" for c in left)
    notes = []
    if left:
        notes.append(f"the modeled study ({len(left)} incomplete simulated run(s) in {layout.sim}) runs in job "
                     f"{gens[0].name if gens else 'book'}"
                     + ("; the other generalization jobs wait for it" if len(gens) > 1 else ""))
    if left and gens:
        gens[0] = replace(gens[0], work_s=gens[0].work_s + modeled_s, basis=gens[0].basis + modeled_basis)
        gens[1:] = [replace(j, after=(gens[0].name,)) for j in gens[1:]]

    jobs: list[Job] = []
    verify_page = layout.book_dir / "book" / "generated" / "00_verify.ipynb"
    if trials or gens or not verify_page.is_file():
        tp = int(planner.values("00_verify", params).get("tensor_parallel_size", 1))
        start = planner.real_start_s()
        jobs.append(Job("verify", ("00_verify",),
                        (*common, "--only", "00_verify", "--book-dir", str(layout.book_dir), "--no-book"),
                        tp if planner.gpus else 0, start + estimate.VERIFY_S,
                        (f"1 engine start {start:.0f} s + {estimate.VERIFY_S:.0f} s of checks",),
                        layout.runs / "verify.%j.log"))
    else:
        skipped.append(("verify", f"nothing to measure and {verify_page} exists"))
    stage = [j.name for j in jobs]
    if trials:
        jobs.append(_after(trials, stage))
        stage = ["trials"]
    jobs += [_after(j, stage) for j in gens]

    book_basis = (f"notebooks over complete runs and the book build {estimate.BOOK_S:.0f} s",)
    jobs.append(Job("book", BOOK_NOTEBOOKS, (*common, "--only", *BOOK_NOTEBOOKS, "--book-dir", str(layout.book_dir)),
                    0, estimate.BOOK_S + (0.0 if gens else modeled_s), book_basis + (() if gens else modeled_basis),
                    layout.runs / "book.%j.log", tuple(j.name for j in jobs)))
    return Plan(tuple(jobs), tuple(skipped), layout.runs, layout.book_dir, tuple(notes), tuple(planner.problems))


def _after(job: Job, names: list[str]) -> Job:
    return replace(job, after=tuple(dict.fromkeys([*job.after, *names])))


def cluster_settings(target: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    """The parameter file's ``cluster`` mapping, refusing keys that mean nothing here by name."""
    raw = target.get("cluster") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"parameter 'cluster' = {raw!r} is invalid: allowed a mapping of cluster settings")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown cluster setting(s) {unknown} in the parameter file; known: {sorted(known)}")
    return dict(raw)
