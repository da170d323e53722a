"""Every committed simulated run stays readable as virtual time arrives: its config parses with today's
settings (no ``clock`` key: real time), its cost profile is the file it ran on (checksum), and it is labelled
as made in real time. Reads the manifests only (their traces are checked by the reproducibility appendix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlfp.analysis.labels import measured_on
from dlfp.paths import REPO_ROOT, sha256
from dlfp.sim.costmodel import profile_file
from dlfp.trials.config import run_config
from dlfp.trials.schema import read_manifest

SIMULATED = sorted(p.parent for p in (REPO_ROOT / "data/runs").glob("**/manifest.json")
                   if '"sim_profile"' in p.read_text(encoding="utf-8") and "/local/" not in str(p))


def test_there_are_committed_simulated_runs() -> None:
    assert len(SIMULATED) >= 20  # the modeled ladder, the studies' modeled targets, the fidelity replay


@pytest.mark.parametrize("run", SIMULATED, ids=lambda p: str(p.relative_to(REPO_ROOT / "data/runs")))
def test_a_committed_simulated_run_reads_as_it_ran(run: Path) -> None:
    manifest = read_manifest(run)
    config = run_config(manifest)
    profile = manifest.sim_profile or {}
    assert sha256(profile_file(profile["name"])) == profile["sha256"], f"{run}: its cost profile changed"
    virtual = config.engine.virtual
    assert ("virtual time, engine costs" in measured_on(manifest)) == virtual
    assert virtual or "real time" in measured_on(manifest)
    assert virtual == (manifest.sim_engine is not None)
