"""The modeled accelerator against the real engine (:mod:`dlfp.analysis.fidelity`), from the committed
``data/runs/sim-fidelity`` traces: every quantity is present, and a virtual replay's columns sit beside the
real-time one's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlfp.analysis.fidelity import compare_runs, compared, fidelity_table
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT / "data" / "runs" / "sim-fidelity"


def test_fidelity_comparison_of_the_committed_runs() -> None:
    """The modeled-vs-real table recomputed from the committed traces: every quantity present."""
    pytest.importorskip("vllm")
    report = compare_runs(ROOT / "real", ROOT / "modeled", ROOT / "profile.yaml")
    table = fidelity_table(report)
    assert {"stock: itl_p99_ms", "dlfp: itl_p99_ms"} <= set(table.quantity)
    assert table.difference.notna().all()
    assert 0 < report["arms"]["stock"]["noise_floor_p50"] < 1


def test_a_virtual_replay_adds_its_columns_beside_the_real_time_one() -> None:
    report = compare_runs(ROOT / "real", ROOT / "modeled", ROOT / "profile.yaml")
    table = fidelity_table({**report, "virtual": report})  # the same replay twice: the same numbers twice
    assert list(table.columns[:5]) == ["quantity", "real", "modeled (real time)", "virtual", "virtual difference"]
    rows = table[table.real.notna()]
    assert rows["virtual"].equals(rows["modeled (real time)"])
    assert rows["virtual difference"].equals(rows["difference (real time)"])
    assert table[table.real.isna()]["virtual difference"].isna().all()  # the fit's own errors: one column


def test_compared_reads_the_virtual_replay_only_where_it_was_made(tmp_path: Path) -> None:
    import shutil

    for part in ("real", "modeled"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "profile.yaml", tmp_path / "profile.yaml")
    assert "virtual" not in compared(tmp_path)
    if (ROOT / "virtual" / "manifest.json").is_file():
        assert "virtual" in compared(ROOT)
