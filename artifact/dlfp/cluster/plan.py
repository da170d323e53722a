"""The job list of a cluster submission: what runs, on how many GPUs, after what, for how long.

Jobs, in dependency order (each waits for the previous stage to succeed, ``afterok``):

1. ``verify``: notebook 00 (the install check, one engine start) into the book;
2. ``trials``: notebook 01, the paired trials, into their run folder;
3. ``gen-<model>-tp<N>``: notebook 02 for one generalization configuration, on ``N`` GPUs;
4. ``book``: notebooks 01 and 02 again over every configuration (all complete: nothing reruns,
   no GPU), then 03 and 04, and the strict book build.

Resubmission re-plans from the run folders: a run whose manifest says ``complete`` gets no job
(an interrupted or failed one is resumed by its job: finished arms are kept), ``verify`` runs
only when something is measured or the book lacks its page, and ``book`` always runs. A folder
its job would refuse (a run of another config, or an unfinished run that started at another
commit than this checkout's) is a problem of the plan, and nothing is submitted. The
modeled study of notebook 02 (simulated, CPU only) is run by the first generalization job when
it is incomplete, with the other generalization jobs waiting for that one so no two jobs write
one run folder; without generalization jobs the book job runs it.

Every job is ``dlfp pipeline --only ...`` with the notebook parameters the pipeline itself would
pass (:func:`dlfp.book.pipeline.effective_parameters`), so the plan reads the configs the notebooks run,
and with its kernels' output in ``jobs/<name>/logs`` (``--logs``), so concurrent jobs write apart.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlfp.book.parameters import check_all
from dlfp.book.pipeline import NOTEBOOKS, effective_parameters, load_target, notebook_parameters
from dlfp.cluster import estimate
from dlfp.trials.config import TrialConfig
from dlfp.trials.runfolder import MANIFEST
from dlfp.trials.schema import Manifest, read_manifest

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


def _manifest(run_dir: Path) -> Manifest | None:
    """A run folder's manifest, None before its run started; a corrupt one is refused by name."""
    return read_manifest(run_dir) if (run_dir / MANIFEST).is_file() else None


def _model_tp(cfg: TrialConfig) -> tuple[str, int]:
    """(model, TP size) a run measures or models (a simulated run's TP is its modeled one)."""
    if cfg.engine.sim is None:
        return cfg.engine.model, cfg.engine.tensor_parallel_size
    from dlfp.sim.config import SimConfig

    return cfg.engine.model, SimConfig(**cfg.engine.sim).tp


class _Planner:
    """The target's notebook parameters and the run folders' state, read once per plan."""

    def __init__(self, layout: Layout, gpus: bool, engine_start_s: float | None, allow_dirty: bool) -> None:
        self.layout = layout
        self.gpus = gpus
        self.engine_start_s = engine_start_s
        self.allow_dirty = allow_dirty
        self.target = load_target(layout.params)
        self.problems: list[str] = []
        self.modeled_rates: dict[tuple[str, int], estimate.Rate] = {}

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

    def learn_rates(self, modeled: list[tuple[Path, TrialConfig]]) -> None:
        """The arrival rate each complete simulated run's scaled design derived, by model and TP size:
        a better guess for a real run of the same model and TP than its config's stand-in rate. Of
        several (one per modeled device), the slowest: the real device is not known here, and a
        limit too short costs a resubmission, one too long only queue priority."""
        from dlfp.trials.config import run_config

        for run_dir, cfg in modeled:
            manifest = _manifest(run_dir)
            if manifest is None or not manifest.complete or manifest.design is None or not _scaled(cfg):
                continue
            rate = estimate.Rate(float(run_config(manifest).workload["rate_rps"]),
                                 f"the rate the modeled study derived ({run_dir.name})")
            known = self.modeled_rates.get(_model_tp(cfg))
            if known is None or rate.rps < known.rps:
                self.modeled_rates[_model_tp(cfg)] = rate

    def rate(self, cfg: TrialConfig, manifest: Manifest | None) -> estimate.Rate | None:
        """The arrival rate a run's missing arms will see, where better known than the config's."""
        from dlfp.trials.config import run_config

        if manifest is not None and manifest.design is not None:
            return estimate.Rate(float(run_config(manifest).workload["rate_rps"]), "the rate its pre-flight derived")
        return self.modeled_rates.get(_model_tp(cfg)) if _scaled(cfg) else None

    def refusal(self, run_dir: Path, cfg: TrialConfig, manifest: Manifest) -> str | None:
        """Why the job would refuse ``run_dir``, checked as the runner checks it: another config, or
        (unfinished) a resume at another commit than the run's (:func:`~dlfp.trials.provenance.resume_refusal`)."""
        from dlfp.trials.manifest import normalized_config  # the runner's own comparison, so the plan agrees
        from dlfp.trials.provenance import resume_refusal

        if normalized_config(manifest.config) != normalized_config(cfg.raw):
            return ("holds a run of another config, which the job would refuse: move it away, regenerate it, or "
                    "choose another --runs/--sim")
        if manifest.complete:
            return None
        refused = resume_refusal(manifest.git, self.allow_dirty)
        if refused is None:
            return None
        return (f"would fail in its job: {refused}. To change cluster settings for a resubmission without a "
                "commit, pass them as options (e.g. --time), not in the parameter file")

    def cost(self, run_dir: Path, cfg: TrialConfig) -> tuple[bool, estimate.RunCost]:
        """(complete, what is left) of one run folder; one its job would refuse is a problem of the plan."""
        from dlfp.trials.manifest import plan_units

        manifest = _manifest(run_dir)
        refused = None if manifest is None else self.refusal(run_dir, cfg, manifest)
        if refused:
            self.problems.append(f"{run_dir} {refused}")
        complete = manifest is not None and manifest.complete
        units = plan_units(cfg) if manifest is None else manifest.units
        start = estimate.SIM_ENGINE_START_S if cfg.engine.sim is not None else self.real_start_s()
        return complete, estimate.run_cost(run_dir.name, cfg.workload, units, manifest is not None, start,
                                           cfg.warmup_requests, self.rate(cfg, manifest))

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


def _scaled(cfg: TrialConfig) -> bool:
    """Does the run's pre-flight set its arrival rate (the config's ``rate_rps`` a stand-in)?"""
    return cfg.design.kind == "scaled"


def plan(layout: Layout, gpus: bool = True, engine_start_s: float | None = None, allow_dirty: bool = False) -> Plan:
    """The jobs still to run for ``layout``; every config is validated here, before any submission.

    Runs in the repository root, where the notebooks run, so relative config paths mean the same.
    ``allow_dirty``: the jobs may resume a run at another commit than the one it started at.
    """
    with contextlib.chdir(layout.root):
        return _plan(_Planner(layout, gpus, engine_start_s, allow_dirty))


def _plan(planner: _Planner) -> Plan:
    layout = planner.layout
    cfg01 = _paired_config(planner)
    run = layout.runs / cfg01.name
    params = planner.params(run)
    check_all(NOTEBOOKS, params, planner.target, str(layout.params))  # a typo refused before any submission
    common = planner.common_args(run)
    skipped: list[tuple[str, str]] = []
    real, modeled = _generalization(planner, params)
    planner.learn_rates(modeled)

    trials = planner.measuring_job("trials", "01_paired_trials", run, cfg01, common)
    if trials is None:
        skipped.append(("trials", f"{run} is complete"))

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
    return Plan(tuple(_own_logs(j, layout) for j in jobs), tuple(skipped), layout.runs, layout.book_dir, tuple(notes),
                tuple(planner.problems))


def _own_logs(job: Job, layout: Layout) -> Job:
    """``job`` with its kernels' output in ``jobs/<name>/logs``: concurrent jobs in one checkout
    would otherwise all write the pipeline's default ``build/logs/<notebook>.log``."""
    return replace(job, pipeline_args=(*job.pipeline_args, "--logs", str(layout.jobs / job.name / "logs")))


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
