"""The SLO controller's capacity goal (``dlfp.studies.capacity_goal``): paired ratios and verdicts that
come out each way, from synthetic per-trial capacities."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlfp.studies.capacity_goal import goal_table, halves, sentence, verdict
from dlfp.studies.capacity_ratio import RatioInterval, compare
from tests.studies.capacity_trials import trial


def _trials(caps: dict[str, list[float]], target: str = "t", level: str = "tight") -> list[dict]:
    return [trial(target, level, arm, k, c) for arm, values in caps.items() for k, c in enumerate(values)]


def _table(trials: pd.DataFrame) -> pd.DataFrame:
    return (trials.groupby(["target", "level", "arm"], sort=False)["capacity_rps"].mean().reset_index()
            .assign(censored="none", source="simulated (cost profile a100)"))


def test_the_ratio_pairs_trials_and_bounds_a_failed_budget() -> None:
    t = pd.DataFrame(_trials({"dlfp-slo": [9.0, 10.0, 11.0, 5.0], "mbt-512": [10.0, 10.0, 10.0, 0.0]}))
    three = compare(t[t.trial < 3], "dlfp-slo", "mbt-512", 0.95)
    assert three.n == 3 and three.estimate == pytest.approx((0.9 * 1.1) ** (1 / 3)) and three.lo < 1.0 < three.hi
    four = compare(t, "dlfp-slo", "mbt-512", 0.95)  # the budget failed at the lowest rate: 5x or more
    assert four.n == 4 and four.censored == 1 and math.isnan(four.estimate) and four.hi == math.inf
    assert compare(t, "dlfp-slo", "absent", 0.95).n == 0


@pytest.mark.parametrize(("lo", "hi", "expected"), [(0.92, 1.1, "within"), (0.5, 0.85, "short"),
                                                     (0.8, 1.0, "undecided"), (math.nan, math.nan,
                                                                               "undecided (no interval)")])
def test_the_verdict_comes_out_either_way(lo: float, hi: float, expected: str) -> None:
    assert verdict(RatioInterval(1.0, lo, hi, 3, 0, 0.95), 0.9, "within", "short") == expected


def test_the_goal_table_judges_each_target_against_its_own_best_budget_and_the_single_one() -> None:
    rows = (_trials({"dlfp-slo": [10.0, 10.1, 9.9], "mbt-256": [10.0, 10.0, 10.0], "mbt-512": [5.0, 5.1, 4.9]}, "a")
            + _trials({"dlfp-slo": [5.0, 5.1, 4.9], "mbt-256": [4.0, 4.0, 4.1], "mbt-512": [10.0, 10.0, 10.0]}, "b")
            + _trials({"mbt-256": [1.0, 1.0, 1.0], "mbt-512": [2.0, 2.0, 2.0]}, "c"))  # no dlfp-slo: no row
    trials = pd.DataFrame(rows)
    goal = goal_table(_table(trials), trials)
    assert list(goal.target) == ["a (simulated)", "b (simulated)"]  # where the numbers come from, always
    goal = goal.assign(target=["a", "b"]).set_index("target")
    assert goal.loc["a", "best budget"] == "mbt-256" and goal.loc["a", "within 10%"] == "within"
    assert goal.loc["b", "best budget"] == "mbt-512" and goal.loc["b", "within 10%"] == "short"
    # The single budget (highest mean share of each target's best, dlfp-slo included): mbt-256 1.0, 0.4
    # and 0.5, mbt-512 0.5, 1.0 and 1.0: mbt-512. On a, dlfp-slo doubles it: above; on b it has half: below.
    assert set(goal["single budget"]) == {"mbt-512"}
    assert goal.loc["a", "above single"] == "above" and goal.loc["b", "above single"] == "below"
    text = sentence(goal.reset_index())
    assert "within 10% on 1 and short of it on 1 of 2" in text
    assert "above the best single budget (mbt-512) on a (tight)" in text
    assert text.endswith("the goal's first half (within 10% everywhere) is not met, its second (above the single "
                         "budget somewhere) met.")
    assert "yet" in sentence(goal.iloc[0:0])


def test_where_no_budget_meets_the_slos_none_is_named_best_and_only_a_capacity_is_within() -> None:
    rows = (_trials({"dlfp-slo": [0.0, 0.0, 0.0], "mbt-256": [0.0, 0.0, 0.0], "mbt-512": [0.0, 0.0, 0.0]}, "a")
            + _trials({"dlfp-slo": [3.0, 0.0, 2.0], "mbt-256": [0.0, 0.0, 0.0], "mbt-512": [0.0, 0.0, 0.0]}, "b"))
    trials = pd.DataFrame(rows)
    goal = goal_table(_table(trials), trials).set_index("target")
    assert list(goal.index) == ["b (simulated)"]  # a ranks nothing (every arm failed in every trial): left out
    assert goal.loc["b (simulated)", "best budget"] == "none meets the SLOs"
    assert goal.loc["b (simulated)", "vs best budget"] == "" and goal.loc["b (simulated)", "within 10%"] == "within"
    assert "within 10% on 1 and short of it on 0 of 1" in sentence(goal.reset_index())


@pytest.mark.parametrize(("within", "above", "expected"), [
    (["within", "within"], ["above", "below"], ("met", "met")),
    (["within", "short"], ["below", "below"], ("not met", "not met")),
    (["within", "undecided"], ["below", "undecided"], ("undecided", "undecided")),
    (["short", "undecided"], ["undecided", "above"], ("not met", "met"))])
def test_each_half_of_the_goal_comes_out_every_way(within: list[str], above: list[str],
                                                    expected: tuple[str, str]) -> None:
    assert halves(pd.DataFrame({"within 10%": within, "above single": above})) == expected
