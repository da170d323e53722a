"""The ``dlfp`` commands that are neither benchmarks nor trials keep working: paired-ci, calibrate."""

from __future__ import annotations

from dlfp.cli import main


def test_paired_ci_command(capsys) -> None:
    assert main(["stats", "paired-ci", "24.8", "30.1", "28.2"]) == 0
    assert "mean 27.70%" in capsys.readouterr().out and main(["stats", "paired-ci", "5"]) == 2


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
