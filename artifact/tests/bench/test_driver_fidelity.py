"""``dlfp bench driver`` (``dlfp.bench.driver_fidelity``): the open-loop client's send lateness, reported."""

from __future__ import annotations

from dlfp.cli import main


def test_driver_benchmark_runs(capsys) -> None:
    assert main(["bench", "driver", "--rate", "100", "--requests", "50", "--output-len", "3"]) == 0
    out = capsys.readouterr().out
    assert "send lateness p50" in out and "100% ok" in out
