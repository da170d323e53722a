"""Helpers for the papermill notebooks: parameter checks that fail before any work starts.

A notebook's parameters arrive as plain values injected by papermill; these functions turn
them into validated configs or raise ``ValueError`` naming the parameter, its value and what
is allowed, so the executed notebook shows a readable message and papermill exits non-zero.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dlfp.models import model_path
from dlfp.trialconfig import TrialConfig, parse_config


def require(ok: bool, name: str, value: Any, allowed: str) -> None:
    """Raise a ``ValueError`` naming a notebook parameter unless ``ok``."""
    if not ok:
        raise ValueError(f"notebook parameter {name!r} = {value!r} is invalid: allowed {allowed}")


class Plain(str):
    """A string glued as itself: ``glue`` stores ``repr``, which would add quotes in the prose."""

    def __repr__(self) -> str:
        return str(self)


def show(fig: Any) -> None:
    """Display a matplotlib figure once, as an embedded PNG whatever the backend, and free it."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buf.getvalue(), format="png"))


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def config_with_overrides(config: str, overrides: Mapping[str, Any]) -> TrialConfig:
    """Load a YAML config, merge ``overrides`` into it (nested), validate the result."""
    require(Path(config).is_file(), "config", config, "a YAML file")
    require(isinstance(overrides, Mapping), "overrides", overrides, "a mapping")
    with open(config, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh) or {}
    return parse_config(_merge(raw, overrides))


def generalization_plan(base_config: str, models: Sequence[str], tensor_parallel_sizes: Sequence[int],
                        rate_scale: Mapping[str, float], out_root: str,
                        overrides: Mapping[str, Any]) -> list[tuple[Path, TrialConfig]]:
    """One validated paired-trial config per (model, TP size), each with its own run folder."""
    require(bool(models) and all(isinstance(m, str) for m in models), "models", models, "a list of model names")
    for m in models:
        try:
            model_path(m)
        except ValueError as exc:
            raise ValueError(f"notebook parameter 'models' has {m!r}: {exc}") from None
    require(bool(tensor_parallel_sizes) and all(isinstance(t, int) and t >= 1 for t in tensor_parallel_sizes),
            "tensor_parallel_sizes", tensor_parallel_sizes, "a list of integers >= 1")
    require(all(isinstance(v, (int, float)) and v > 0 for v in rate_scale.values()),
            "rate_scale", rate_scale, "positive numbers per model")
    base = config_with_overrides(base_config, overrides)
    plan = []
    for m in models:
        for tp in tensor_parallel_sizes:
            name = f"{base.name}-{m}-tp{tp}"
            rate = base.workload["rate_rps"] * rate_scale.get(m, 1.0)
            raw = _merge(base.raw, {"name": name, "engine": {"model": m, "tensor_parallel_size": tp},
                                    "workload": {"rate_rps": rate}})
            plan.append((Path(out_root) / f"{m}-tp{tp}", parse_config(raw)))
    return plan


def modeled_plan(base_config: str, runs: Sequence[Mapping[str, Any]] | None, out_root: str,
                 overrides: Mapping[str, Any]) -> list[tuple[Path, TrialConfig]]:
    """One validated simulated paired-trial config per ``{profile, model, tp[, dlfp]}`` entry
    (``None``: the committed study, :data:`dlfp.sim.study.STUDY_RUNS`).

    Each run's arrival rate, DLFP ITL objective and SLOs come from its own modeled decode
    step (:mod:`dlfp.sim.study`); ``overrides`` (e.g. fewer trials) apply to every run.
    """
    from dlfp.sim.config import SimConfig
    from dlfp.sim.costmodel import ModelShape, Profile, load_profile
    from dlfp.sim.study import STUDY_RUNS, StudyRun, decode_step_s, scaled_settings

    runs = STUDY_RUNS if runs is None else runs
    require(bool(runs) and all(isinstance(r, Mapping) for r in runs), "runs", runs,
            "a list of {profile, model, tp} mappings")
    base = config_with_overrides(base_config, overrides)
    require(base.engine.sim is not None, "base_config", base_config, "a config with engine.sim set")
    long_weight = sum(c["weight"] for c in base.workload["classes"] if c["name"] == "long")
    total_weight = sum(c["weight"] for c in base.workload["classes"])
    plan = []
    for entry in runs:
        unknown = sorted(set(entry) - {"profile", "model", "tp", "dlfp"})
        require(not unknown, "runs", entry, "keys profile, model, tp and optionally dlfp (a variant's parameters)")
        run = StudyRun(**entry)
        try:
            shape = ModelShape.from_dir(model_path(run.model))
            profile = load_profile(run.profile)
        except ValueError as exc:
            raise ValueError(f"notebook parameter 'runs' has {dict(entry)!r}: {exc}") from None
        require(isinstance(profile, Profile), "runs", entry, "roofline profiles (a fitted one models one machine)")
        sim = {**base.engine.sim, "profile": run.profile, "tp": run.tp}
        decode_s = decode_step_s(shape, profile, run.tp, SimConfig(**sim).dtype_bytes)
        settings = scaled_settings(decode_s, long_weight / total_weight)
        settings["dlfp"].update(run.dlfp)  # a controller variant's own parameters
        raw = _merge(base.raw, {"name": f"{base.name}-{run.label}", "engine": {"model": run.model, "sim": sim},
                                **settings})
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


def modeled_design(plan: Sequence[tuple[Path, TrialConfig]]) -> Any:
    """Per simulated run: the modeled decode step and the load and targets derived from it."""
    import pandas as pd

    from dlfp.sim.config import SimConfig
    from dlfp.sim.costmodel import ModelShape, load_profile
    from dlfp.sim.study import decode_step_s

    rows = []
    for run_dir, cfg in plan:
        sim = SimConfig(**(cfg.engine.sim or {}))
        step = decode_step_s(ModelShape.from_dir(model_path(cfg.engine.model)), load_profile(sim.profile),
                             sim.tp, sim.dtype_bytes)
        rows.append({"run": Path(run_dir).name, "profile": sim.profile, "model": cfg.engine.model, "TP": sim.tp,
                     "modeled decode step (ms)": step * 1e3, "arrival rate (req/s)": cfg.workload["rate_rps"],
                     "DLFP itl_slo_ms": cfg.dlfp.get("itl_slo_ms"),
                     "TPOT SLO (ms)": cfg.raw["slo"]["tpot_ms"], "TTFT SLO (ms)": cfg.raw["slo"]["ttft_ms"]})
    return pd.DataFrame(rows)
