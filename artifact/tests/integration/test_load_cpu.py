"""``dlfp bench load`` (``dlfp.bench.load``): 10,000-request style load on the real engine core, tiny here.

Starts a real engine core over the modeled executor: slow.
"""

from __future__ import annotations

import pytest

from dlfp.bench import load


@pytest.mark.slow
def test_load_benchmark_runs(capsys) -> None:
    """A few requests through what ``dlfp bench load`` runs (one modeled engine start, ~20 s on 2 idle cores)."""
    pytest.importorskip("vllm")
    assert load.main(["--requests", "20", "--rate", "20"]) == 0
    out = capsys.readouterr().out
    assert "20 recorded of 20, 20 ok" in out and "(exact)" in out and "BEYOND LOOPBACK" not in out
    assert "send lateness: p50" in out and "engine core (EngineCore)" in out
