"""Helpers for the papermill notebooks: parameter checks that fail before any work starts.

A notebook's parameters arrive as plain values injected by papermill; their forms are declared and
checked in :mod:`dlfp.book.parameters`, and these functions turn them into validated configs and runs
or raise the same ``ValueError`` naming the parameter, its value and what is allowed, so the executed
notebook shows a readable message and papermill exits non-zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dlfp.book.parameters import Generalization, refuse
from dlfp.control.params import parse_params
from dlfp.paths import model_label, model_path
from dlfp.trials.config import TrialConfig, merge, parse_config, read_yaml

if TYPE_CHECKING:
    from dlfp.analysis.runs import RunData


def require(ok: bool, name: str, value: Any, allowed: str) -> None:
    """Raise the ``ValueError`` of an invalid notebook parameter (:func:`dlfp.book.parameters.refuse`) unless
    ``ok``: what a parameter's value must hold beyond its declared form."""
    if not ok:
        raise refuse(name, value, allowed)


def run_folder(run_dir: str) -> Path:
    """``run_dir`` as a run folder (one with a manifest), or the error naming the parameter."""
    require(Path(run_dir, "manifest.json").is_file(), "run_dir", run_dir, "a run folder with manifest.json")
    return Path(run_dir)


def rendered_run(run_dir: str) -> RunData:
    """The paired run a results page leads with: a run folder with at least one complete paired trial."""
    from dlfp.analysis.runs import load_run

    run = load_run(run_folder(run_dir))
    require(len(run.trials) > 0, "run_dir", run_dir, "a run with at least one complete paired trial")
    return run


class Plain(str):
    """A string glued as itself: ``glue`` stores ``repr``, which would add quotes in the prose."""

    def __repr__(self) -> str:
        return str(self)


def run_label(run_dir: str) -> str:
    """How prose may call a rendered run: "the committed run" only when it is one."""
    from dlfp.trials.provenance import committed

    return "the committed run" if committed(run_dir) else f"the run in {run_dir} (not a committed run)"


def png(fig: Any) -> Any:
    """A matplotlib figure as an embedded PNG (an IPython ``Image``), whatever the backend; the figure
    is freed. Without matplotlib's ``Software`` stamp the PNG's bytes depend on the figure alone, so a
    re-rendered book reproduces the committed one (:mod:`dlfp.book.render`)."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return Image(data=buf.getvalue(), format="png")


def show(fig: Any, caption: str, glue_as: str | None = None) -> None:
    """Display a figure once (:func:`png`) with its caption under it: what to see in it and where its
    data come from, in words a reader needs before the axes. ``glue_as``: also glue the image under
    that name, for another page to paste (the first page's headline figure)."""
    from IPython.display import Markdown, display

    image = png(fig)
    if glue_as is not None:
        from myst_nb import glue

        glue(glue_as, image, display=False)
    display(image)
    words = " ".join(caption.split()).replace("*", r"\*")  # "T*" would end the emphasis
    display(Markdown(f"*{words}*"))


def config_with_overrides(config: str, overrides: Mapping[str, Any]) -> TrialConfig:
    """Load a YAML config, merge ``overrides`` into it (nested), validate the result."""
    require(isinstance(config, str) and Path(config).is_file(), "config", config, "a YAML file")
    require(isinstance(overrides, Mapping), "overrides", overrides, "a mapping")
    return parse_config(merge(read_yaml(config), overrides))


def generalization_plan(base_config: str, models: Sequence[str], tensor_parallel_sizes: Sequence[int],
                        out_root: str, overrides: Mapping[str, Any]) -> list[tuple[Path, TrialConfig]]:
    """One validated paired-trial config per (model, TP size), each with its own run folder.

    Each run's load and targets come from its own pre-flight (the config's ``design``), so one
    base config serves every model shape.
    """
    Generalization(models=models, tensor_parallel_sizes=tensor_parallel_sizes, out_root=out_root)  # their forms
    base = config_with_overrides(base_config, overrides)
    labels: dict[str, str] = {}
    for m in models:
        try:
            model_path(m, base.engine.download_dir)  # the cache the overrides name, as the trials will read it
            label = model_label(m)
        except (ValueError, OSError) as exc:  # OSError: a name too long for a path
            raise ValueError(f"notebook parameter 'models' has {m!r}: {exc}") from None
        require(label not in labels, "models", models,
                f"models with distinct folder names ({labels.get(label)!r} and {m!r} would both run in {label!r})")
        labels[label] = m
    plan = []
    for label, m in labels.items():
        for tp in tensor_parallel_sizes:
            raw = merge(base.raw, {"name": f"{base.name}-{label}-tp{tp}",
                                   "engine": {"model": m, "tensor_parallel_size": tp}})
            plan.append((Path(out_root) / f"{label}-tp{tp}", parse_config(raw)))
    return plan


def modeled_plan(base_config: str, runs: Sequence[Mapping[str, Any]] | None, out_root: str,
                 overrides: Mapping[str, Any]) -> list[tuple[Path, TrialConfig]]:
    """One validated simulated paired-trial config per ``{profile, model, tp[, dlfp]}`` entry
    (``None``: the committed study, :data:`dlfp.studies.generalization.STUDY_RUNS`).

    Each run's arrival rate, DLFP ITL objective and SLOs come from its own pre-flight on the
    modeled engine (the config's ``design``, :mod:`dlfp.trials.design`); ``overrides`` (e.g. fewer
    trials) apply to every run, a run's ``dlfp`` entry to its DLFP arm.
    """
    from dlfp.sim.costmodel import ModelShape, Profile, check_tp, load_profile
    from dlfp.studies.generalization import STUDY_RUNS, StudyRun

    runs = STUDY_RUNS if runs is None else runs
    require(isinstance(runs, list | tuple) and bool(runs) and all(isinstance(r, Mapping) for r in runs), "runs", runs,
            "a list of {profile, model, tp} mappings")
    base = config_with_overrides(base_config, overrides)
    require(base.engine.sim is not None, "base_config", base_config, "a config with engine.sim set")
    plan = []
    for entry in runs:
        unknown = sorted(set(entry) - {"profile", "model", "tp", "dlfp"}, key=str)
        require(not unknown and isinstance(entry.get("profile"), str) and isinstance(entry.get("model"), str)
                and isinstance(entry.get("dlfp", {}), Mapping), "runs", entry,
                "keys profile, model, tp and optionally dlfp (profile and model: names; dlfp: a variant's parameters)")
        run = StudyRun(**entry)
        try:
            parse_params(run.dlfp)
            profile = load_profile(run.profile)
            check_tp(ModelShape.from_dir(model_path(run.model)), run.tp)
        except (ValueError, OSError) as exc:  # OSError: a name too long for a path
            raise ValueError(f"notebook parameter 'runs' has {dict(entry)!r}: {exc}") from None
        require(isinstance(profile, Profile), "runs", entry, "roofline profiles (a fitted one models one machine)")
        raw = merge(base.raw, {"name": f"{base.name}-{run.label}",
                               "engine": {"model": run.model, "sim": {**(base.engine.sim or {}), "profile": run.profile,
                                                                      "tp": run.tp}},
                               "dlfp": dict(run.dlfp)})
        plan.append((Path(out_root) / run.label, parse_config(raw)))
    return plan


def profile_table(names: Sequence[str]) -> Any:
    """Every number of the named cost profiles as ``value (source)``, one column per profile."""
    import pandas as pd

    from dlfp.sim.costmodel import profile_file

    columns = {}
    for name in names:
        raw = yaml.safe_load(profile_file(name).read_text(encoding="utf-8"))
        columns[f"{name}: {raw['device']}"] = {
            f"{section}.{key}": f"{entry['value']} ({entry['source']})"
            for section in ("compute", "memory", "interconnect", "host") for key, entry in raw[section].items()}
    return pd.DataFrame(columns)
