"""A paired trial through the harness on the modeled accelerator (simulated A100, Qwen3-0.6B shape):
the reduced artifact's modeled run (``conftest.py``: the pipeline made it, so no engine starts here)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from dlfp.analysis.labels import source_line
from dlfp.analysis.runs import load_run, trial_rows
from dlfp.trials.config import parse_config
from tests.integration.slurm_cluster import MODELED_RUN, ReducedArtifact

pytestmark = pytest.mark.slow


def test_modeled_paired_trial_is_complete_and_labelled_simulated(reduced_artifact: ReducedArtifact) -> None:
    run = load_run(reduced_artifact.sim / MODELED_RUN)
    rows = trial_rows(run)
    assert (rows.n_failed == 0).all() and (rows.output_mismatches == 0).all()
    assert (rows.agreement_rate == 1.0).all()
    assert source_line(run).startswith("simulated: cost profile a100")
    steps = run.tables[(0, "dlfp")]["steps"]
    assert (steps.schedule_t.shift(-1) < steps.complete_t).any()  # async: step N+1 scheduled before N completes


def test_bad_sim_settings_refused_before_any_engine() -> None:
    with pytest.raises(ValueError, match="dlfp_sim setting 'tp' = 0"):
        parse_config({"engine": {"sim": {"tp": 0}}})
    with pytest.raises(ValueError, match="unknown dlfp_sim setting"):
        parse_config({"engine": {"sim": {"gpu": "a100"}}})
