"""Capacity from a rate sweep (``dlfp.studies.capacity``): interpolation, censoring, the table."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dlfp.paths import REPO_ROOT
from dlfp.studies import command
from dlfp.studies.capacity import (
    COLUMNS,
    POINTS,
    STAMP,
    capacity_table,
    load_points,
    margin,
    stale,
    study_points,
    trial_capacities,
    trial_capacity,
    write_tables,
)
from dlfp.trials.runfolder import RunFolderError, write_parquet


def test_the_margin_is_the_worse_p99_over_its_slo() -> None:
    assert margin(50, 100, 100, 100) == 0.0
    assert margin(150, 100, 100, 400) == pytest.approx(0.5)


def test_capacity_interpolates_between_the_last_pass_and_the_first_failure() -> None:
    # Margins -0.5 at 2 req/s and +0.5 at 4 req/s cross at 3 req/s; the pass at 8 after a failure is ignored.
    assert trial_capacity([1, 2, 4, 8], [-0.8, -0.5, 0.5, -0.1]) == (3.0, "none", 2, 4)
    assert trial_capacity([4, 1, 2], [0.5, -0.8, -0.5]) == (3.0, "none", 2, 4)  # any order
    assert trial_capacity([1, 2], [-0.5, -0.1]) == (2, "above", 2, math.inf)
    assert trial_capacity([1, 2], [0.1, 0.5]) == (0.0, "below", 0.0, 1)
    assert trial_capacity([1, 2], [-0.5, math.nan]) == (1, "none", 1, 2)  # nothing measurable fails
    with pytest.raises(ValueError, match="repeats"):
        trial_capacity([1, 1], [0, 0])
    with pytest.raises(ValueError, match="positive"):
        trial_capacity([0, 1], [0, 0])


@given(st.lists(st.tuples(st.floats(0.01, 1000), st.floats(-1, 5)), min_size=1, max_size=8,
                unique_by=lambda x: x[0]))
@example([(1.2461335532734008, -1.0), (18.15899394607268, 1.387754155212172e-152)])  # rounding past the bracket
def test_capacity_lies_in_its_bracket_and_every_rate_below_it_passed(pts: list[tuple[float, float]]) -> None:
    rates, margins = zip(*pts, strict=True)
    cap, censored, lo, hi = trial_capacity(rates, margins)
    assert lo <= cap <= hi
    below = [m for r, m in sorted(pts) if r <= lo]
    assert all(m <= 0 for m in below)
    if censored == "none":
        assert dict(pts)[hi] > 0


def _points(arm: str, caps: list[float], level: str = "tight") -> list[dict]:
    """Rows of a sweep at 1..6 req/s whose P99 ITL crosses the 10 ms SLO at each trial's ``cap``."""
    rows = []
    for trial, cap in enumerate(caps):
        for rate in range(1, 7):
            rows.append({"target": "t", "level": level, "arm": arm, "family": "x", "trial": trial,
                         "rate_rps": float(rate),
                         "itl_p99_ms": 10.0 * rate / cap, "ttft_p99_ms": 1.0, "itl_slo_ms": 10.0,
                         "ttft_slo_ms": 100.0, "bound_rps": 8.0, "top_rate_rps": 6.0,
                         "span_s": 4.0 if rate < 6 else 2.0,
                         "send_late_p99_ms": 50.0 if rate == 6 and trial == 0 else 1.0,
                         "source": "simulated (cost profile a100)"})
    return rows


def test_the_table_gives_each_arm_its_mean_interval_and_ratio_to_stock() -> None:
    points = pd.DataFrame(_points("stock", [2.0, 2.0, 2.0]) + _points("dlfp", [3.0, 4.0, 5.0])
                          + _points("mbt-256", [9.0, 9.0, 9.0]))
    t = capacity_table(points).set_index("arm")
    assert list(capacity_table(points).columns) == COLUMNS
    assert t.loc["stock", "capacity_rps"] == pytest.approx(2.0) and t.loc["stock", "censored"] == "none"
    assert t.loc["dlfp", "capacity_rps"] == pytest.approx(4.0)
    assert t.loc["dlfp", "ci_low_rps"] < 4.0 < t.loc["dlfp", "ci_high_rps"]
    assert t.loc["dlfp", "vs_stock"] == pytest.approx(2.0) and t.loc["dlfp", "share_of_bound"] == pytest.approx(0.5)
    # The shortest point spans 2 s: an overload of 100 ms / 2 s = 5% could pass its TTFT SLO.
    assert t.loc["dlfp", "resolution"] == pytest.approx(0.05)
    # Trial 0's top point went out 50 ms late (p99): one of the arm's 18 points.
    assert (t.loc["dlfp", "late_points"], t.loc["dlfp", "n_points"]) == (1, 18)
    # Every point passes: at least the top rate, with no interval and no ratio to an estimate it is not.
    assert t.loc["mbt-256", "censored"] == "above" and t.loc["mbt-256", "capacity_rps"] == 6.0
    assert math.isnan(t.loc["mbt-256", "ci_low_rps"])


def test_a_trial_missing_a_point_below_its_failure_does_not_count_one_stopped_above_it_does() -> None:
    points = pd.DataFrame(_points("stock", [2.0, 3.0]))
    gap = points[~((points.trial == 1) & (points.rate_rps == 2.0))]  # below its failure at 4 req/s
    t = capacity_table(gap)
    assert t.loc[0, "n_trials"] == 1 and t.loc[0, "capacity_rps"] == pytest.approx(2.0)
    stopped = points[~((points.trial == 1) & (points.rate_rps > 4.0))]  # a sweep stopped at its failure
    assert capacity_table(stopped).equals(capacity_table(points).assign(n_points=capacity_table(stopped).n_points))


def test_the_per_trial_capacities_are_those_the_table_averages() -> None:
    points = pd.DataFrame(_points("stock", [2.0, 3.0]))
    t = trial_capacities(points)
    assert list(t.capacity_rps) == pytest.approx([2.0, 3.0]) and set(t.censored) == {"none"}


COMMITTED = REPO_ROOT / "data" / "runs" / "study-capacity"


def cut_committed(tmp_path: Path, arms: tuple[str, ...], target: str = "a100-qwen3-0.6b") -> Path:
    """A study folder holding a real committed capacity run cut to trial 0's units of ``arms`` (the
    rest pending): the real traces and manifest, small enough to read in a second."""
    src = COMMITTED / target
    dst = tmp_path / "study" / src.name
    manifest = json.loads((src / "manifest.json").read_text(encoding="utf-8"))
    keep = [u for u in manifest["units"] if u["trial"] == 0 and u["arm"] in arms]
    manifest["units"] = [u if u in keep else {k: u[k] for k in ("trial", "seed", "arm")} | {"status": "pending"}
                         for u in manifest["units"]]
    manifest["status"] = "partial"
    shutil.copytree(src / "preflight", dst / "preflight")
    for k in sorted({u["trial"] for u in manifest["units"]}):
        (dst / f"trial-{k}").mkdir()
        shutil.copy(src / f"trial-{k}" / "workload.parquet", dst / f"trial-{k}" / "workload.parquet")
    for u in keep:
        shutil.copytree(src / "trial-0" / u["arm"], dst / "trial-0" / u["arm"])
    (dst / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return dst.parent


@pytest.fixture
def small_study(tmp_path: Path) -> Path:
    """The committed 0.6B target cut to trial 0's stock points: a study whose points take a second to
    recompute."""
    return cut_committed(tmp_path, ("stock", "stock_0.3", "stock_0.45"))


def test_stamped_points_are_read_back_and_any_change_under_them_recomputes(small_study: Path) -> None:
    fresh, why = load_points(small_study)
    assert "no points.parquet" in why and len(fresh) == 3 * 2  # three points, each at both levels
    assert command.main(["capacity", "--tables", "--out", str(small_study)]) == 0
    read, why = load_points(small_study)
    assert why is None
    pd.testing.assert_frame_equal(read, fresh)
    stamp = json.loads((small_study / STAMP).read_text(encoding="utf-8"))
    (small_study / STAMP).write_text(json.dumps({**stamp, "code": "0" * 64}), encoding="utf-8")
    assert "code that computes the points changed" in stale(small_study)
    (small_study / STAMP).write_text(json.dumps(stamp), encoding="utf-8")
    write_parquet(fresh.assign(itl_p99_ms=fresh.itl_p99_ms / 2), small_study / POINTS)
    assert "was changed since it was written" in stale(small_study)
    write_tables(small_study)
    manifest = small_study / "a100-qwen3-0.6b" / "manifest.json"
    manifest.write_text(manifest.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert "runs under" in stale(small_study) and load_points(small_study)[1] is not None
    for corrupt in ("{", "[]"):
        (small_study / STAMP).write_text(corrupt, encoding="utf-8")
        assert "is corrupt" in stale(small_study)


def test_a_trace_edited_under_a_stamp_is_refused_as_the_traces_are(small_study: Path) -> None:
    write_tables(small_study)
    trace = small_study / "a100-qwen3-0.6b" / "trial-0" / "stock" / "tokens.parquet"
    trace.write_bytes(trace.read_bytes() + b"\0")
    with pytest.raises(RunFolderError, match=r"tokens\.parquet"):
        load_points(small_study)


def test_tables_are_rewritten_only_for_the_capacity_study_and_an_existing_folder(tmp_path: Path) -> None:
    for study, out in (("baselines", tmp_path), ("capacity", tmp_path / "no")):
        with pytest.raises(SystemExit):
            command.main([study, "--tables", "--out", str(out)])
    points, why = load_points(tmp_path)  # a folder with no run: nothing to read, nothing recomputed
    assert points.empty and why is None


def test_the_committed_points_stand_for_the_committed_traces(small_study: Path) -> None:
    """Else the book recomputes every point from the traces (minutes per target): after a change to the
    code of :data:`POINT_CODE` or a new target, ``dlfp study capacity --tables --out`` this folder. Some
    committed points are also recomputed with today's code, so a change that moves a number from a module
    the stamp does not hash fails here too."""
    assert stale(COMMITTED) is None
    fresh = study_points(small_study)
    committed = load_points(COMMITTED)[0].merge(fresh[["target", "unit_arm", "trial", "level"]])
    pd.testing.assert_frame_equal(committed, fresh, check_like=True)


def test_unfinished_runs_are_named_with_their_units_done(small_study: Path) -> None:
    from dlfp.studies.capacity import unfinished

    manifest = json.loads((small_study / "a100-qwen3-0.6b" / "manifest.json").read_text(encoding="utf-8"))
    total = len(manifest["units"])
    assert unfinished(small_study) == {"a100-qwen3-0.6b": f"3 of {total} units"}  # trial 0's three stock points
    write_tables(small_study)  # its points are kept, its capacities are not: part of a sweep
    assert len(pd.read_parquet(small_study / POINTS)) == 6 and pd.read_parquet(small_study / "capacity.parquet").empty
    done = small_study.parent / "done" / "a100-qwen3-0.6b"  # only the manifest is read
    done.mkdir(parents=True)
    (done / "manifest.json").write_text(json.dumps({**manifest, "status": "complete"}), encoding="utf-8")
    assert unfinished(done.parent) == {}
