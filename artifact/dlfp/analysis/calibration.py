"""A measured run's step records fitted into a modeled-accelerator profile (``dlfp calibrate``).

The fit itself is pure (:mod:`dlfp.sim.stepfit`); this is the glue that reads a verified run
folder and names where the profile came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dlfp.analysis.labels import source_line
from dlfp.analysis.runs import load_run
from dlfp.paths import model_path, sha256
from dlfp.sim.costmodel import ModelShape
from dlfp.sim.enginefit import engine_host_fit
from dlfp.sim.stepfit import FittedProfile, fit
from dlfp.trials.runfolder import MANIFEST


def calibrate_engine(run_dir: str | Path, *, arms: Sequence[str] = ("stock", "dlfp"), name: str | None = None
                     ) -> dict[str, Any]:
    """The engine-core profile of a measured synchronous run (:func:`dlfp.sim.enginefit.engine_host_fit`): what
    virtual time charges around each fitted step, from the same units :func:`calibrate_run` fits."""
    run = load_run(run_dir, tables=("steps", "tokens"))
    if run.manifest.config["engine"].get("sim") is not None:
        raise ValueError(f"{run_dir} is a simulated run: calibrate on measured step records")
    units = [(k, arm) for (k, arm) in sorted(run.tables) if arm in arms]
    return engine_host_fit([run.tables[u]["steps"] for u in units], [run.tables[u]["tokens"] for u in units],
                           name or f"engine-{Path(run_dir).name}", f"{run_dir} ({source_line(run)})")


def calibrate_run(run_dir: str | Path, *, arms: Sequence[str] = ("stock", "dlfp"), seed: int = 0,
                  name: str | None = None) -> FittedProfile:
    """Fit a run folder's step records (every complete trial of ``arms``) into a profile."""
    run = load_run(run_dir, tables=("steps",))
    engine = run.manifest.config["engine"]
    if engine.get("sim") is not None:
        raise ValueError(f"{run_dir} is a simulated run: calibrate on measured step records")
    units = [(k, arm) for (k, arm) in sorted(run.tables) if arm in arms]
    if not units:
        raise ValueError(f"{run_dir}: no complete unit of arm(s) {list(arms)}")
    result = fit([run.tables[u]["steps"] for u in units], seed=seed)
    shape = ModelShape.from_dir(model_path(engine["model"]))
    return FittedProfile(
        name=name or f"fitted-{Path(run_dir).name}", device=source_line(run), fit=result,
        shape=asdict(shape), kv_cache_gib=float(engine.get("kv_cache_gib", 1)),
        calibration={"run": str(run_dir), "manifest_sha256": sha256(Path(run_dir) / MANIFEST),
                     "units": [f"trial-{k}/{arm}" for k, arm in units], "model": engine["model"],
                     "dtype": engine.get("dtype")},
    )
