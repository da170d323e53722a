"""``dlfp bench virtual``: the modes comparison on one committed target's stock units (their P99s and
capacity in both modes, same units), and the speed benchmark's replay clock."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlfp.bench import virtual_time
from dlfp.paths import REPO_ROOT


def test_the_replay_stamp_keeps_the_replay_start_only() -> None:
    stamp = virtual_time._Stamp()
    assert math.isnan(stamp.t)
    stamp(1)
    assert math.isnan(stamp.t)
    stamp(0)
    assert stamp.t > 0


@pytest.mark.slow
def test_modes_compares_the_same_units_in_both_clocks(tmp_path: Path) -> None:
    report = virtual_time.modes(REPO_ROOT / virtual_time.STUDY, ["a100-qwen3-8b"], tmp_path, arms=("stock",),
                                workers=1, allow_dirty=True)
    [row] = report["summary"]
    assert row["target"] == "a100-qwen3-8b" and row["units"] == 21  # stock at seven loads, three trials
    assert 0 <= row["itl_p99_median_abs_diff"] < 0.5 and 0 <= row["ttft_p99_median_abs_diff"] < 0.5
    levels = {(c["level"], c["arm"]) for c in report["capacity"]}
    assert levels == {("tight", "stock"), ("relaxed", "stock")}
    assert all(c["real"] > 0 and c["virtual"] > 0 for c in report["capacity"])
    units = report["units"]
    assert len(units) == 21 and all(0 < u["itl_p50_ms_virtual"] <= u["itl_p99_ms_virtual"] for u in units)
    assert all(0 < u["itl_p50_ms_real"] <= u["itl_p99_ms_real"] for u in units)
    assert set(report["files"]["a100-qwen3-8b"]) == {f"trial-{u['trial']}/{u['unit_arm']}" for u in units}


def test_the_explanations_replays_are_every_run_the_table_reads(tmp_path: Path) -> None:
    from dlfp.studies.explanations import VARIANTS
    from dlfp.studies.plans import FAST_HOST_ENGINE, PAPER_TARGETS

    jobs = virtual_time.explanation_replays(Path("b"), Path("e"), tmp_path)
    read = {(study, pattern.format(target=t)) for study, pattern, _ in VARIANTS.values() for t in PAPER_TARGETS}
    replayed = {(dst.parent.name.removeprefix("study-"), dst.name) for _, dst, _, _ in jobs}
    assert replayed == read
    for src, _dst, arms, engine in jobs:
        assert (engine == FAST_HOST_ENGINE) == src.name.startswith("fast-host")
        assert arms is None or {arm for _, _, arm in VARIANTS.values()} >= set(arms)
