"""The benchmark commands keep working (tiny sizes; the figures themselves are not asserted)."""

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
