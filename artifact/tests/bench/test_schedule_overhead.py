"""``dlfp bench schedule`` (``dlfp.bench.schedule_overhead``): DLFP schedule() time over stock's, side by side."""

from __future__ import annotations

import pytest

from dlfp.cli import main


def test_schedule_benchmark_runs(capsys) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "schedule", "--running", "8", "--rounds", "2", "--steps-per-round", "5"]) == 0
    out = capsys.readouterr().out
    assert "decode:" in out and "mixed:" in out and "ratio" in out
