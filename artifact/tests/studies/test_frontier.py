"""DLFP against fixed budgets (``dlfp.studies.frontier``): the Pareto frontier, regret, the goal across
targets (an arm faster to first token than every fixed budget is a hit where it dominates the fastest,
not comparable where it does not), the targets near a verdict's line, the TTFT spread and its premise."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlfp.studies import frontier
from dlfp.studies.frontier import ITL, REGRET, TTFT


def _table(rows: list[tuple[str, str, float, float]], objective: float = 50.0,
           settings: dict[str, str] | None = None) -> pd.DataFrame:
    """run_table-like rows: (arm, kind, P99 ITL, P99 TTFT)."""
    t = pd.DataFrame(rows, columns=["arm", "kind", ITL, TTFT])
    t["settings"] = [(settings or {}).get(a, a) for a in t.arm]
    t["itl objective (ms)"] = objective
    return frontier.regret(t)


def test_regret_is_against_the_best_fixed_budget_at_no_larger_ttft() -> None:
    t = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                ("dlfp", "adaptive", 44, 35), ("fast", "adaptive", 110, 5), ("near", "adaptive", 44, 29),
                ("dominant", "adaptive", 90, 5)]).set_index("arm")
    assert t.at["dlfp", REGRET] == pytest.approx(4.0)
    assert t.at["near", REGRET] == pytest.approx(4.0)  # 30 ms is within 5% of 29 ms: equal TTFT
    assert math.isnan(t.at["fast", REGRET])  # faster to first token than every fixed budget, slower than stock
    assert t.at["dominant", REGRET] == pytest.approx(-10.0)  # faster than stock on both: beats the frontier
    assert t.at["mbt-256", "meets ITL objective"] and not t.at["stock", "meets ITL objective"]
    assert t.at["dlfp", "TTFT excess over best arm meeting it (%)"] == pytest.approx(100 * (35 / 29 - 1))
    pct = frontier.relative_regret(t.reset_index())
    assert pct["dlfp"] == pytest.approx(10.0) and math.isnan(pct["fast"])  # not comparable: no fixed budget is
    assert pct["dominant"] == pytest.approx(-10.0)


def test_goal_names_the_winner_or_the_closest_and_the_missing_targets() -> None:
    a = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                ("dlfp", "adaptive", 43, 31), ("other", "adaptive", 80, 31)])  # regrets 7.5% and 100%

    def b(dlfp_itl: float) -> pd.DataFrame:
        return _table([("stock", "fixed budget", 30, 10), ("mbt-256", "fixed budget", 20, 40),
                       ("dlfp", "adaptive", dlfp_itl, 45), ("other", "adaptive", 21, 41)])  # other: 5%

    text = frontier.goal({"x": a, "y": b(26)}, ("x", "y", "z"))
    assert "no adaptive controller lands within 10%" in text and "(not run: z)" in text
    assert "the closest, dlfp, does on 1 of 2 (near the line on x: 8%) and is 30% above it on y" in text  # ties
    # broken by the worst regret; 7.5% is within 5 points of the 10% line
    assert "on the 2 targets run (not run: z), on the runs' means;" in text
    assert "single fixed budgets that meet the ITL objective on every one of them: mbt-256." in text
    won = frontier.goal({"x": a, "y": b(21.5)}, ("x", "y"))
    assert won.startswith("dlfp lands within 10% of the best fixed")
    assert "(near the line: dlfp on x: 8%, dlfp on y: 8%)" in won
    far = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                  ("dlfp", "adaptive", 40, 31)])
    assert "near the line" not in frontier.goal({"x": far}, ("x",))  # regret 0: 10 points from the line
    labelled = frontier.goal({"x": a, "y": b(26)}, ("x", "y"), {"x": "simulated", "y": "measured"})
    assert "is 30% above it on y (measured);" in labelled


def test_an_arm_faster_than_every_fixed_budget_and_slower_than_the_fastest_is_not_comparable() -> None:
    x = _table([("stock", "fixed budget", 30, 10), ("mbt-256", "fixed budget", 20, 40),
                ("dlfp", "adaptive", 90, 5)])  # faster to first token than both: no budget at equal TTFT
    y = _table([("stock", "fixed budget", 30, 10), ("mbt-256", "fixed budget", 20, 40),
                ("dlfp", "adaptive", 21, 40)])  # 5% above mbt-256
    text = frontier.goal({"x": x, "y": y}, ("x", "y"))
    assert text.startswith("no adaptive controller lands within 10% of the best fixed budget at equal TTFT")
    assert ("the closest, dlfp, does on 1 of 2 (near the line on y: 5%) (not comparable on 1: faster to first "
            "token than every fixed budget, slower between tokens than the fastest) and is 5% above it on y;") in text
    alone = frontier.goal({"x": x}, ("x",))  # not comparable anywhere: no gap to name
    assert "the closest, dlfp, does on 0 of 1 (not comparable on 1: faster to first token than every fixed " \
           "budget, slower between tokens than the fastest); single fixed budgets" in alone and alone.endswith(".")


def test_the_closest_arm_skips_targets_it_is_not_comparable_on_in_any_order() -> None:
    fixed = [("stock", "fixed budget", 30, 10), ("mbt-256", "fixed budget", 20, 40)]
    x = _table([*fixed, ("a", "adaptive", 90, 5), ("b", "adaptive", 26, 40)])  # a: not comparable, b: 30%
    y = _table([*fixed, ("a", "adaptive", 30, 40), ("b", "adaptive", 28, 40)])  # a: 50%, b: 40%
    for targets in (("x", "y"), ("y", "x")):
        text = frontier.goal({t: {"x": x, "y": y}[t] for t in targets}, targets)
        assert "the closest, b, does on 0 of 2 and is 40% above it on y;" in text  # a's worst is 50%, not NaN


def test_goal_tells_a_per_target_budget_from_a_single_one() -> None:
    a = _table([("sarathi", "fixed budget", 40, 30), ("dlfp", "adaptive", 41, 30)], settings={"sarathi": "mbt=291"})
    b = _table([("sarathi", "fixed budget", 40, 30), ("dlfp", "adaptive", 41, 30)], settings={"sarathi": "mbt=900"})
    text = frontier.goal({"x": a, "y": b}, ("x", "y"))
    assert "no single fixed budget meets" in text and "(budgets derived per target that do: sarathi)" in text
    assert frontier.goal({}, ("x",)).startswith("not testable")


def test_ttft_spread_is_over_single_fixed_budgets_only() -> None:
    def run(derived: str, derived_ttft: float) -> pd.DataFrame:
        return _table([("stock", "fixed budget", 100, 200), ("mbt-256", "fixed budget", 40, 220),
                       ("sarathi", "fixed budget", 30, derived_ttft), ("dlfp", "adaptive", 43, 900)],
                      settings={"sarathi": derived})

    one = {"x": run("mbt=90", 900)}  # one target: its derived budget has one setting, so it counts
    assert frontier.ttft_spread(one) == "x 200-900 ms (350% apart)"
    both = {"x": run("mbt=90", 900), "y": run("mbt=300", 210)}  # derived per target: left out
    assert frontier.single_budgets(both) == {"stock", "mbt-256"}
    assert frontier.ttft_spread(both) == "x 200-220 ms (10% apart); y 200-220 ms (10% apart)"
    assert frontier.ttft_spread({}) == "no baselines run"


def test_ttft_premise_comes_out_either_way() -> None:
    def run(small_chunk_ttft: float) -> pd.DataFrame:
        return _table([("stock", "fixed budget", 100, 100), ("mbt-256", "fixed budget", 40, small_chunk_ttft)])

    kinds = {"cpu": "measured", "gpu": "simulated", "gpu2": "simulated"}
    holds = frontier.ttft_premise({"cpu": run(105), "gpu": run(150), "gpu2": run(130)}, kinds)
    assert holds == ("the premise holds: the measured spread is below every simulated one (5% measured, "
                     "30-50% simulated)")
    fails = frontier.ttft_premise({"cpu": run(160), "gpu": run(150), "gpu2": run(130)}, kinds)
    assert fails.startswith("the premise does not hold: the measured spread is above every simulated one (60% measured")
    assert frontier.ttft_premise({"cpu": run(140), "gpu": run(150), "gpu2": run(130)}, kinds).startswith(
        "the premise is mixed")
    assert frontier.ttft_premise({"gpu": run(150)}, kinds).startswith("not testable")


def test_effects_table_has_a_row_per_target_and_a_cell_per_arm() -> None:
    def table(rows: list[tuple[str, float, float, float]]) -> pd.DataFrame:
        return pd.DataFrame(rows, columns=["arm", "ITL reduction vs stock (%)", "ITL CI lo (%)", "ITL CI hi (%)"])

    tables = {"cpu-tiny": table([("dlfp", 60.5, 37.5, 83.5), ("cap", 70.0, math.nan, math.nan)]),
              "a100-qwen3-8b": table([("dlfp", -3.04, -9.0, 2.96)])}
    got = frontier.effects_table(tables, ["dlfp", "cap"])
    assert list(got.index) == ["cpu-tiny", "a100-qwen3-8b"] and list(got.columns) == ["dlfp", "cap"]
    assert got.loc["cpu-tiny", "dlfp"] == "60.5% (37.5 to 83.5)"
    assert got.loc["cpu-tiny", "cap"] == "70.0%"  # one trial: no interval
    assert got.loc["a100-qwen3-8b", "dlfp"] == "-3.0% (-9.0 to 3.0)"
    assert got.loc["a100-qwen3-8b", "cap"] == "not run"
    assert frontier.reduction_cell(math.nan, math.nan, math.nan) == "no value"  # ran, but no mean: not "not run"


def test_target_summary_says_not_run_where_a_run_lacks_the_arm() -> None:
    new = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                  ("dlfp-slo", "adaptive", 45, 33)])
    old = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 60, 30)])
    got = frontier.target_summary({"new": new, "old": old})
    assert list(got.columns) == ["new", "old"] and got.index[0] == "stock"
    assert got.loc["dlfp-slo", "new"] == "+10% TTFT" and got.loc["dlfp-slo", "old"] == "not run"
    assert got.loc["mbt-256", "old"] == "misses ITL (60 > 50 ms)"


def test_objective_goal_holds_only_where_every_target_meets_within_the_line() -> None:
    def run(slo_itl: float, slo_ttft: float) -> pd.DataFrame:
        return _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                       ("dlfp-slo", "adaptive", slo_itl, slo_ttft)])

    ok = {"x": run(45, 32), "y": run(49, 30)}  # +6.7% and +0%
    assert frontier.objective_goal(ok, "dlfp-slo", ("x", "y")) == (
        "the goal for dlfp-slo (the ITL objective met on every target with at most 10% P99 TTFT over the best arm "
        "meeting it) holds on the runs' means: it meets the objective on 2 of 2 targets, within 10% on 2; near a "
        "line (within 5 points), where a rerun may fall the other way: x (+7% TTFT), y (ITL 49 against 50 ms).")
    clear = frontier.objective_goal({"x": run(40, 30)}, "dlfp-slo", ("x",))  # +0%, 20% under the objective
    assert clear.endswith("; no target lies within 5 points of either line.")
    over = frontier.objective_goal({"x": run(45, 34), "y": run(60, 20)}, "dlfp-slo", ("x", "y", "z"))
    assert "does not hold" in over and "on 1 of 2 targets, within 10% on 0" in over
    assert "does not hold" in frontier.objective_goal({"x": run(45, 34)}, "dlfp-slo", ("x",))  # TTFT alone
    assert "misses it on y: 60 > 50 ms" in over and "pays +13% on x" in over and "not run on z" in over
    labelled = frontier.objective_goal({"x": run(45, 34)}, "dlfp-slo", ("x",), {"x": "measured"})
    assert "it pays +13% on x (measured); near a line" in labelled and labelled.endswith(": x (measured) (+13% TTFT).")
    old = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30)])
    assert "does not hold" in frontier.objective_goal({**ok, "old": old}, "dlfp-slo", ("x", "y", "old"))
    assert frontier.objective_goal({"old": old}, "dlfp-slo", ("old",)) == "not testable: no run has dlfp-slo"
