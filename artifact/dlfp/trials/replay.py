"""A simulated run's units again, in virtual time, under the design the run recorded.

To compare the two modes unit by unit (``dlfp bench sim modes``), the virtual run must replay what the
real-time run replayed: the same seeded workloads at the same rates, judged at the same SLOs. A fresh
run would measure its own pre-flight, and a virtual pre-flight sees other host costs than a real-time
one on this machine, so its design (rates, SLOs) would differ. Here the new run's manifest starts with
the recorded design (and the pre-flight's step records it cites), so the runner takes it as a resumed
run's and runs no pre-flight; the manifest says which run it came from (``design.replayed_from``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from dlfp.trials.arms import REFERENCE
from dlfp.trials.config import CPU_DEFAULT, REAL_TIME_ONLY, TrialConfig, merge, parse_config
from dlfp.trials.manifest import exclusive, open_run
from dlfp.trials.runfolder import PREFLIGHT_STEPS, RunFolderError
from dlfp.trials.schema import Manifest, read_manifest, write_manifest


def virtual_config(manifest: Manifest, arms: Iterable[str] | None = None,
                   engine: str | None = None) -> TrialConfig:
    """The config of a recorded simulated run on the virtual clock: fields that only a started engine uses
    at their defaults, only ``arms`` (with the reference arm) where given, the engine-core cost profile
    ``engine`` where given (else the default), and a capacity sweep's every point (a comparison unit by unit
    replays what the recorded run ran, not where the virtual one would stop: :mod:`dlfp.trials.stopping`)."""
    raw = dict(manifest.config)
    if (raw.get("engine") or {}).get("sim") is None:
        raise RunFolderError(f"run {manifest.name!r} ran a real model, not the modeled accelerator: "
                             "there is nothing to replay in virtual time")
    raw = merge(raw, {"engine": {"sim": {"clock": "virtual", **({"engine": engine} if engine else {})}}})
    raw.update({key: CPU_DEFAULT[key] for key in REAL_TIME_ONLY})
    if (raw.get("design") or {}).get("kind") == "capacity":  # the same units as the recorded run, not its own stops
        raw["design"] = {**raw["design"], "stop_at_failure": False}
    if arms is not None:
        keep = {*arms, REFERENCE}
        raw["arms"] = [a for a in raw["arms"] if a["name"] in keep]
        missing = sorted(keep - {a["name"] for a in raw["arms"]})
        if missing:
            raise RunFolderError(f"run {manifest.name!r} has no arm(s) {missing}")
    raw["name"] = f"{raw['name']}-virtual"
    return parse_config(raw)


def prepare(src: Path, out: Path, arms: Iterable[str] | None = None, allow_dirty: bool = False,
            engine: str | None = None) -> TrialConfig:
    """Open ``out`` for the virtual replay of ``src`` (its recorded design in place); returns the config to
    hand :func:`dlfp.trials.runner.run_trials`. Resuming an earlier replay into ``out`` keeps what it has."""
    recorded = read_manifest(src)
    design = recorded.design
    if design is None:
        raise RunFolderError(f"{src} records no design to replay under")
    config = virtual_config(recorded, arms, engine)
    with exclusive(out):
        manifest = open_run(config, out, allow_dirty)
        if manifest.design is None:
            if (src / PREFLIGHT_STEPS).is_file():
                (out / PREFLIGHT_STEPS).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / PREFLIGHT_STEPS, out / PREFLIGHT_STEPS)
            overrides = dict(design.get("overrides") or {})
            if "arms" in overrides:  # the design resolved every arm of the run: keep the replayed ones
                overrides["arms"] = [a for a in overrides["arms"] if a["name"] in config.arm_names]
            manifest.design = {**design, "overrides": overrides, "replayed_from": str(src)}
            write_manifest(out, manifest)
    return config
