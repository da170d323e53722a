"""The book's virtual-time tables (:mod:`dlfp.analysis.virtual_time`) from report mappings: aims judged per
target, provenance in words, and a headline that counts what the tables show."""

from __future__ import annotations

from pathlib import Path

from dlfp.analysis import virtual_time as vt

PROV = {"argv": ["dlfp", "bench", "virtual", "modes"], "machine": "2-core AMD EPYC", "vllm": "0.32.0+cpu",
        "date": "2026-12-06T03:00:00+00:00", "git": {"commit": "abcdef0123456789", "dirty": False}}
MODES = {"summary": [
    {"target": "a", "units": 10, "itl_p99_median_abs_diff": 0.01, "itl_p99_median_diff": -0.01,
     "ttft_p99_median_abs_diff": 0.02, "ttft_p99_median_diff": 0.02},
    {"target": "b", "units": 10, "itl_p99_median_abs_diff": 0.30, "itl_p99_median_diff": -0.30,
     "ttft_p99_median_abs_diff": 0.02, "ttft_p99_median_diff": 0.02}],
    "capacity": [{"target": "a", "level": "tight", "arm": "stock", "real": 2.0, "virtual": 2.2, "diff": 0.1}],
    "provenance": PROV}
SPEED = {"units": [{"target": "a", "unit": "trial-0/stock_0.6", "requests": 50, "span_s": 10.0, "real_unit_s": 40.0,
                    "real_replay_s": 12.0, "virtual_s": 1.0, "ratio_unit": 40.0, "ratio_replay": 12.0}],
         "provenance": PROV}


def test_each_target_is_judged_against_the_aims() -> None:
    s = vt.modes_summary(MODES)
    assert s["within the aims (5% ITL, 10% TTFT)"].tolist() == ["yes", "no"]
    assert vt.modes_capacity(MODES)["difference"].tolist() == [0.1]


def test_the_headline_counts_targets_and_speed_ups() -> None:
    line = vt.headline(MODES, SPEED)
    assert "1 of 2 modeled targets stay within the aims" in line and ": a;" in line
    assert "12.0x to 12.0x faster" in line and "2-core AMD EPYC" in line
    assert vt.headline(None, None) == "no virtual-time report is committed yet."


def test_provenance_reads_as_words(tmp_path: Path) -> None:
    said = vt.made_by(MODES)
    assert "`dlfp bench virtual modes`" in said and "commit abcdef01 (clean)" in said and "2026-12-06" in said
    assert vt.load(tmp_path / "none.json") is None
    assert vt.speed(SPEED)["speed-up, replay"].tolist() == [12.0]


def test_the_explanations_columns_pair_up() -> None:
    col = "pattern (0.6B works; 8B, 32B, TP=2 do not)"
    report = {"real": [{"variant": "(a)", col: "reproduces the pattern"}],
              "virtual": [{"variant": "(a)", col: "does not"}]}
    t = vt.explanations(report)
    assert t.to_dict("records") == [{"explanation": "(a)", "real time": "reproduces the pattern",
                                     "virtual time": "does not"}]


def test_the_lightest_load_shows_medians_and_tails_side_by_side() -> None:
    units = [{"target": "a", "unit_arm": arm, "trial": k, "itl_p50_ms_real": 1.0 + k, "itl_p50_ms_virtual": 1.0 + k,
              "itl_p99_ms_real": 6.0, "itl_p99_ms_virtual": 2.0} for k in range(3) for arm in ("stock", "stock_0.6")]
    t = vt.lightest_load({"units": units})
    assert t.to_dict("records") == [{"target": "a", "P50 ITL, real (ms)": 2.0, "P50 ITL, virtual (ms)": 2.0,
                                     "P99 ITL, real (ms)": 6.0, "P99 ITL, virtual (ms)": 2.0}]
