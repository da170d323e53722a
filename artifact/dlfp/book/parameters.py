"""Each notebook's parameters, declared once (:mod:`dlfp.control.fields`): the check, its error message
and the reference table (book/reference/commands.md) come from these classes.

A notebook's ``parameters`` cell must stay literal assignments (papermill reads and overrides them), so it
repeats the defaults; a test compares the cell with the declaration, name for name and value for value.
The notebook's next cell checks what it was given with :func:`check` (one call), and ``dlfp pipeline``
checks every notebook's parameters before the first one runs (:func:`check_all`): a typo in the last
notebook's parameters, or a key of a parameter file that no notebook declares, is refused in a second,
not after hours of trials.

What a parameter's value must hold beyond its form (a config file that parses, a model that is shipped,
a run folder with complete trials) is checked where the notebook reads it
(:func:`dlfp.book.notebook.config_with_overrides`, :func:`dlfp.book.notebook.generalization_plan`,
:func:`dlfp.book.notebook.rendered_run`): some of those files are written by an earlier notebook of
the same job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlfp.control.fields import (
    declared,
    mapping,
    markdown_table,
    name,
    nested,
    pattern,
    refuse_invalid,
    rule,
    same_as,
    switch,
    texts,
)
from dlfp.harness.engine import EngineSpec

TP_SIZES = f"a non-empty list of integers in {rule(EngineSpec, 'tensor_parallel_size').allowed}"
"""What ``tensor_parallel_sizes`` takes: each an engine's ``tensor_parallel_size``."""
TARGET_ONLY = frozenset({"cluster"})
"""Keys of a parameter file that no notebook reads: ``dlfp cluster submit``'s site settings."""


def refuse(field_name: str, value: Any, allowed: str) -> ValueError:
    """The error every notebook parameter check raises."""
    return ValueError(f"notebook parameter {field_name!r} = {value!r} is invalid: allowed {allowed}")


@dataclass(frozen=True, kw_only=True)
class Verify:
    """``00_verify``: start one engine with DLFP's scheduler and see it cap prefill chunks."""

    model: str = name("qwen3-tiny", "The model the install check starts: a shipped weightless config, a checkpoint "
                                    "directory or a cached hub id (random weights either way).")
    tensor_parallel_size: int = same_as(EngineSpec, "tensor_parallel_size", 1, "GPUs of the engine the check starts "
                                                                               "(TP).")
    dtype: str = same_as(EngineSpec, "dtype", "float32", "The engine's precision.")
    expected_vllm: str = pattern("0.32.0", r"\d+\.\d+\.\d+", "a version such as 0.32.0",
                                 "The vLLM version the artifact is pinned to: another installed one fails the check.")
    work_dir: str = name("build/verify", "Scratch space for the check's step log and engine output (emptied first).")
    enforce_eager: bool = switch(False, "true: no model compilation at the engine start (a start in half the time).")
    overrides: Mapping[str, Any] = mapping("A parameter file's engine overrides: only `engine.download_dir` is read "
                                           "here, the cache a hub id is read from.")

    def __post_init__(self) -> None:
        refuse_invalid(self, refuse)
        if not isinstance(self.overrides.get("engine", {}), Mapping):
            raise refuse("overrides", self.overrides, "a mapping whose engine entry is a mapping")


@dataclass(frozen=True, kw_only=True)
class PairedTrials:
    """``01_paired_trials``: run (or resume) the paired trials of one config."""

    config: str = name("configs/cpu-default.yaml", "The trial config (YAML): its keys are book/reference/trials.md's.")
    run_dir: str = name("data/runs/cpu-default", "The run folder: written afresh, resumed, or refused if it holds "
                                                 "another run.")
    overrides: Mapping[str, Any] = mapping("Merged over the config (nested), e.g. `{trials: 2, workload: "
                                           "{n_requests: 12}}`; the result is checked before any engine starts.")
    allow_dirty: bool = switch(False, "true: run even if the code differs from its git commit (recorded in the "
                                      "manifest, and said wherever the run is shown).")

    def __post_init__(self) -> None:
        refuse_invalid(self, refuse)


@dataclass(frozen=True, kw_only=True)
class Generalization:
    """``02_generalization``: the measured ladder (each model x TP size) and the modeled study."""

    base_config: str = name("configs/cpu-generalization.yaml", "The config each measured run starts from (each "
                                                              "run's load and targets come from its own pre-flight).")
    models: Sequence[str] = texts(
        "The measured runs' models (at least one): shipped names, checkpoint directories or cached hub ids "
        "(qwen3-mini also ships; each model adds ~5 min on 2 cores).", default=("qwen3-tiny", "qwen3-small"))
    tensor_parallel_sizes: Sequence[int] = nested(TP_SIZES,
                                                    "The measured runs' TP sizes (each with each model).", default=(1,))
    out_root: str = name("data/runs/generalization-cpu", "The measured runs' folder, one run folder per model and "
                                                         "TP size.")
    overrides: Mapping[str, Any] = mapping("Merged over the base config for every measured run.")
    modeled_config: str = name("configs/sim-generalization.yaml", "The config each modeled run starts from "
                                                                 "(`engine.sim` set).")
    modeled_runs: Any = nested("null or a list of {profile, model, tp[, dlfp]}", "The modeled runs; null: the "
                               "committed study (`dlfp.studies.generalization.STUDY_RUNS`).", default=None)
    modeled_root: str = name("data/runs/generalization-sim", "The modeled runs' folder (the committed one is "
                                                             "complete: nothing reruns).")
    modeled_overrides: Mapping[str, Any] = mapping("Merged over the modeled config for every modeled run.")
    allow_dirty: bool = switch(False, "true: run even if the code differs from its git commit (recorded in the "
                                      "manifest).")

    def __post_init__(self) -> None:
        if isinstance(self.models, list | tuple) and not self.models:
            raise refuse("models", self.models, "a non-empty list of model names")
        refuse_invalid(self, refuse)
        sizes, engine = self.tensor_parallel_sizes, rule(EngineSpec, "tensor_parallel_size")
        if not (isinstance(sizes, list | tuple) and sizes and all(
                isinstance(t, int) and engine.accepts(t, None) for t in sizes)):
            raise refuse("tensor_parallel_sizes", sizes, TP_SIZES)
        object.__setattr__(self, "tensor_parallel_sizes", tuple(sizes))


@dataclass(frozen=True, kw_only=True)
class Reproducibility:
    """``04_reproducibility``: the appendix that audits every run the results chapter renders."""

    run_dir: str = name("data/runs/cpu-default", "The paired run the results chapter leads with (a CPU or a GPU "
                                                 "run).")
    generalization_root: str = name("data/runs/generalization-cpu", "The measured generalization runs.")
    modeled_root: str = name("data/runs/generalization-sim", "The modeled generalization runs.")
    fidelity_root: str = name("data/runs/sim-fidelity", "The modeled accelerator's fidelity runs.")
    baselines_root: str = name("data/runs/study-baselines", "`dlfp study baselines`' runs.")
    sensitivity_root: str = name("data/runs/study-sensitivity", "`dlfp study sensitivity`'s runs.")
    explanations_root: str = name("data/runs/study-explanations", "`dlfp study explanations`' runs.")
    capacity_root: str = name("data/runs/study-capacity", "`dlfp study capacity`'s runs and tables.")
    speed_runs: tuple[str, ...] = texts("One design on two machine speeds.",
                                        default=("data/runs/cpu-default", "data/runs/cpu-default-1core"))
    trials_runs: tuple[str, ...] = texts("3 x 100 against 6 x 50 requests.",
                                         default=("data/runs/cpu-default", "data/runs/cpu-default-6x50"))
    gpu_run_dir: str = pattern("", r"(?s:.*)", "a run folder, or empty: none",
                               "A GPU run to judge beside a CPU `run_dir` (a GPU `run_dir` is the gpu source itself).")

    def __post_init__(self) -> None:
        refuse_invalid(self, refuse)


@dataclass(frozen=True, kw_only=True)
class Results(Reproducibility):
    """``03_results``: every table and figure of the results chapter, from the runs' traces."""

    gpu_calibration_profile: str = name("data/runs/gpu-calibrate-h200/h200-measured.yaml",
                                        "A cost profile measured on a GPU node (`make gpu-calibrate`).")
    stability_root: str = name("data/runs/study-stability", "`dlfp study stability`: the default design repeated.")
    virtual_root: str = name("data/runs/virtual-time", "`dlfp bench virtual modes|speed|explanations` reports.")


NOTEBOOK_PARAMETERS: dict[str, type] = {"00_verify": Verify, "01_paired_trials": PairedTrials,
                                        "02_generalization": Generalization, "03_results": Results,
                                        "04_reproducibility": Reproducibility}
"""Each notebook's declaration, by the notebook's name (``notebooks/<name>.ipynb``)."""


def check(notebook: str, namespace: Mapping[str, Any]) -> Any:
    """The notebook's parameters as its declared class, read from ``namespace`` (a notebook passes
    ``globals()``, where papermill put them); raises :func:`refuse`'s error for the first invalid one."""
    cls = NOTEBOOK_PARAMETERS[notebook]
    return cls(**{f.name: namespace[f.name] for f, _ in declared(cls)})


def declared_names() -> frozenset[str]:
    """Every parameter some notebook declares."""
    return frozenset(f.name for cls in NOTEBOOK_PARAMETERS.values() for f in dataclasses.fields(cls))


def check_all(names: tuple[str, ...], params: Mapping[str, Mapping[str, Any]], target: Mapping[str, Any],
              source: str = "the parameter file") -> None:
    """Before the first notebook runs: refuse a ``target`` key that no notebook declares (a typo would
    otherwise be dropped without a word), and each of ``names``' parameters as it will run (its defaults,
    then the target's values it declares, then ``params[name]``), naming the notebook."""
    unknown = sorted(set(target) - declared_names() - TARGET_ONLY, key=str)
    if unknown:
        raise ValueError(f"{source} has {', '.join(map(repr, unknown))}, which no notebook declares: the notebooks' "
                         f"parameters are {', '.join(sorted(declared_names()))} (and `cluster` holds site settings)")
    for notebook in names:
        cls = NOTEBOOK_PARAMETERS[notebook]
        mine = {f.name for f in dataclasses.fields(cls)}
        try:
            cls(**{**{k: v for k, v in target.items() if k in mine}, **params.get(notebook, {})})
        except ValueError as exc:
            raise ValueError(f"{notebook}: {exc}") from None


def markdown_tables() -> str:
    """Every notebook's parameters as a Markdown table under the notebook's name (a page pastes it)."""
    def purpose(cls: type) -> str:
        said = (cls.__doc__ or "").splitlines()[0].split(": ", 1)[1]
        return said[0].upper() + said[1:]

    return "\n".join(f"### `{notebook}`\n\n{purpose(cls)}\n\n{markdown_table(cls, 'parameter')}"
                     for notebook, cls in NOTEBOOK_PARAMETERS.items())
