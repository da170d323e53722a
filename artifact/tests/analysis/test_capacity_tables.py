"""The capacity study's reader tables (``dlfp.analysis.capacity_tables``) from a synthetic table."""

from __future__ import annotations

import math

import pandas as pd

from dlfp.analysis.capacity_tables import by_target, cell, design, findings


def _row(target: str, level: str, arm: str, family: str, cap: float, lo: float = math.nan, hi: float = math.nan,
         censored: str = "none", source: str = "simulated (cost profile a100)") -> dict:
    return {"target": target, "level": level, "arm": arm, "family": family, "capacity_rps": cap, "ci_low_rps": lo,
            "ci_high_rps": hi, "censored": censored, "bracket_high_rps": 2.0, "itl_slo_ms": 10.0,
            "ttft_slo_ms": 100.0, "min_rate_rps": 1.0, "max_rate_rps": 8.0, "bound_rps": 9.0, "resolution": 0.05,
            "late_points": 1, "n_points": 12, "source": source}


TABLE = pd.DataFrame([
    _row("a", "tight", "dlfp", "DLFP law", 4.0, 3.0, 5.0),
    _row("a", "tight", "stock", "stock", 2.0, -0.5, 4.5),
    _row("a", "tight", "mbt-512", "fixed budget", 8.0, censored="above"),
    _row("b", "tight", "stock", "stock", 1.0, censored="below", source="measured"),
    _row("b", "relaxed", "stock", "stock", 3.0, censored="mixed", source="measured"),
])


def test_a_cell_is_the_estimate_and_interval_or_the_bound_a_censored_sweep_gives() -> None:
    rows = {(r.target, r.level, r.arm): cell(r) for r in TABLE.itertuples()}
    assert rows[("a", "tight", "dlfp")] == "4 (3-5)"
    assert rows[("a", "tight", "stock")] == "2 (0-4.5)"  # a capacity is never negative
    assert rows[("a", "tight", "mbt-512")] == "≥ 8"
    assert rows[("b", "tight", "stock")] == "< 2"  # the lowest rate's bracket
    assert rows[("b", "relaxed", "stock")] == "3 (some trials censored)"


def test_the_grid_has_an_arm_per_row_in_family_order_and_a_target_per_column() -> None:
    grid = by_target(TABLE, "tight")
    assert list(grid.index) == ["stock", "mbt-512", "dlfp"]
    assert list(grid.columns) == ["a (simulated)", "b (measured)"]
    assert grid.loc["dlfp", "b (measured)"] == ""  # not run there: blank, not a number


def test_the_design_table_states_what_each_capacity_is_measured_against() -> None:
    d = design(TABLE)
    assert list(d["target"]) == ["a (simulated)", "b (measured)", "b (measured)"]
    assert list(d["overload that can pass (%)"]) == ["5", "5", "5"]
    assert d.iloc[0]["rates swept (req/s)"] == "1-8" and d.iloc[0]["bound (req/s)"] == "9"
    assert list(d["points sent late (p99 > 10 ms)"]) == ["3 of 36", "1 of 12", "1 of 12"]  # summed over arms


def test_the_findings_say_which_arm_won_where_how_many_tie_and_how_far_the_defaults_are() -> None:
    which = pd.DataFrame([
        {"target": "a", "level": "tight", "ranked": True, "best": "mbt-512", "best_rps": 4.0, "tied": "dlfp, cap",
         "defaults_share": 0.5, "budget": "mbt-512", "budget_share": 1.0},
        {"target": "b", "level": "tight", "ranked": True, "best": "mbt-512", "best_rps": 2.0, "tied": "",
         "defaults_share": 0.9, "budget": "mbt-512", "budget_share": 1.0},
        {"target": "a", "level": "relaxed", "ranked": False, "best": "none meets the SLOs", "best_rps": 0.0,
         "tied": "",
         "defaults_share": float("nan"), "budget": "mbt-512", "budget_share": float("nan")},
    ])
    table = findings(which)
    assert table.to_dict("records") == [
        {"SLO level": "tight", "highest capacity (targets)": "mbt-512 (2 of 2)",
         "arms the trials cannot tell from it": "0-2", "DLFP's defaults reach": "50-90%",
         "best single budget (mbt-512) reaches": "100%"},
        {"SLO level": "relaxed", "highest capacity (targets)": "none ranked (0 of 1)",
         "arms the trials cannot tell from it": "", "DLFP's defaults reach": "",
         "best single budget (mbt-512) reaches": ""}]
