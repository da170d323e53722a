"""``dlfp bench sim`` (``dlfp.bench.sim_fidelity``): the modeled executor's overhead, and modeled against measured."""

from __future__ import annotations

import pytest

from dlfp.cli import main


def test_sim_overhead_benchmark_runs(capsys) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "sim", "overhead", "--steps", "100", "--running", "4"]) == 0
    assert "overhead beyond the modeled time p50" in capsys.readouterr().out


def test_the_report_prints_its_targets() -> None:
    from pathlib import Path

    from dlfp.bench.sim_fidelity import compare_runs, format_fidelity

    root = Path("data/runs/sim-fidelity")
    report = compare_runs(root / "real", root / "modeled", root / "profile.yaml")
    text = format_fidelity({**report, "calibration_run": "x", "validation_config": "y",
                            "fit": {"n_train": 1, "heldout_rel_err_p50": 0.1}})
    assert "within 10%" in text
