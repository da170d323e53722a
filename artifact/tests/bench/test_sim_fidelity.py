"""``dlfp bench sim`` (``dlfp.bench.sim_fidelity``): the modeled executor's overhead, and modeled against measured."""

from __future__ import annotations

import pytest

from dlfp.cli import main


def test_sim_overhead_benchmark_runs(capsys) -> None:
    pytest.importorskip("vllm")
    assert main(["bench", "sim", "overhead", "--steps", "100", "--running", "4"]) == 0
    assert "overhead beyond the modeled time p50" in capsys.readouterr().out


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


def test_a_virtual_replay_adds_its_columns_beside_the_real_time_one() -> None:
    from pathlib import Path

    from dlfp.bench.sim_fidelity import compare_runs, fidelity_table

    root = Path("data/runs/sim-fidelity")
    report = compare_runs(root / "real", root / "modeled", root / "profile.yaml")
    table = fidelity_table({**report, "virtual": report})  # the same replay twice: the same numbers twice
    assert list(table.columns[:5]) == ["quantity", "real", "modeled (real time)", "virtual", "virtual difference"]
    rows = table[table.real.notna()]
    assert rows["virtual"].equals(rows["modeled (real time)"])
    assert rows["virtual difference"].equals(rows["difference (real time)"])
    assert table[table.real.isna()]["virtual difference"].isna().all()  # the fit's own errors: one column
