"""The benchmark commands keep working (tiny sizes; the figures themselves are not asserted).
"""

from __future__ import annotations

import pytest

from dlfp.cli import main


def test_driver_benchmark_runs(capsys) -> None:
    assert main(["bench", "driver", "--rate", "100", "--requests", "50", "--output-len", "3"]) == 0
    out = capsys.readouterr().out
    assert "send lateness p50" in out and "100% ok" in out


def test_schedule_benchmark_runs(capsys) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "schedule", "--running", "8", "--rounds", "2", "--steps-per-round", "5"]) == 0
    out = capsys.readouterr().out
    assert "decode:" in out and "mixed:" in out and "ratio" in out


def test_paired_ci_command(capsys) -> None:
    assert main(["stats", "paired-ci", "24.8", "30.1", "28.2"]) == 0
    assert "mean 27.70%" in capsys.readouterr().out and main(["stats", "paired-ci", "5"]) == 2


def test_sim_overhead_benchmark_runs(capsys) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "sim", "overhead", "--steps", "100", "--running", "4"]) == 0
    assert "overhead beyond the modeled time p50" in capsys.readouterr().out


def test_calibrate_command_writes_a_profile_once(tmp_path, capsys) -> None:
    from dlfp.sim.costmodel import load_profile
    from dlfp.sim.stepfit import FittedProfile

    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "data/runs/cpu-default", "--arms", "stock", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "held-out relative error: p50" in text and "profile written" in text
    profile = load_profile(out)
    assert isinstance(profile, FittedProfile) and profile.calibration["model"] == "qwen3-tiny"
    assert profile.calibration["units"] == ["trial-0/stock", "trial-1/stock", "trial-2/stock"]
    assert profile.device.startswith("measured: ")
    assert main(["calibrate", "data/runs/cpu-default", "--out", str(out)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err


def test_fidelity_comparison_of_the_committed_runs() -> None:
    """The modeled-vs-real table recomputed from the committed traces: every quantity present."""
    pytest.importorskip("vllm")
    from pathlib import Path

    from dlfp.bench.sim_fidelity import compare_runs, fidelity_table, format_fidelity

    root = Path("data/runs/sim-fidelity")
    report = compare_runs(root / "real", root / "modeled", root / "profile.yaml")
    table = fidelity_table(report)
    assert {"stock: itl_p99_ms", "dlfp: itl_p99_ms"} <= set(table.quantity)
    assert table.difference.notna().all()
    assert 0 < report["arms"]["stock"]["noise_floor_p50"] < 1
    text = format_fidelity({**report, "calibration_run": "x", "validation_config": "y",
                            "fit": {"n_train": 1, "heldout_rel_err_p50": 0.1}})
    assert "within 10%" in text
