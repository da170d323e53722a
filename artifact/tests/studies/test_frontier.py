"""DLFP against fixed budgets (``dlfp.studies.frontier``): regret, the goal across targets, the TTFT spread."""

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
                ("dlfp", "adaptive", 44, 35), ("fast", "adaptive", 90, 5), ("near", "adaptive", 44, 29)]
               ).set_index("arm")
    assert t.at["dlfp", REGRET] == pytest.approx(4.0)
    assert t.at["near", REGRET] == pytest.approx(4.0)  # 30 ms is within 5% of 29 ms: equal TTFT
    assert math.isnan(t.at["fast", REGRET])  # faster to first token than every fixed budget
    assert t.at["mbt-256", "meets ITL objective"] and not t.at["stock", "meets ITL objective"]
    assert t.at["dlfp", "TTFT excess over best arm meeting it (%)"] == pytest.approx(100 * (35 / 29 - 1))
    pct = frontier.relative_regret(t.reset_index())
    assert pct["dlfp"] == pytest.approx(10.0) and pct["fast"] == -math.inf


def test_goal_names_the_winner_or_the_closest_and_the_missing_targets() -> None:
    a = _table([("stock", "fixed budget", 100, 10), ("mbt-256", "fixed budget", 40, 30),
                ("dlfp", "adaptive", 43, 31), ("other", "adaptive", 80, 31)])  # regrets 7.5% and 100%

    def b(dlfp_itl: float) -> pd.DataFrame:
        return _table([("stock", "fixed budget", 30, 10), ("mbt-256", "fixed budget", 20, 40),
                       ("dlfp", "adaptive", dlfp_itl, 45), ("other", "adaptive", 21, 41)])  # other: 5%

    text = frontier.goal({"x": a, "y": b(26)}, ("x", "y", "z"))
    assert "no adaptive controller lands within 10%" in text and "(not run: z)" in text
    assert "the closest, dlfp, does on 1 of 2 and is 30% above it on y" in text  # ties broken by the worst regret
    assert "single fixed budgets that meet the ITL objective on every one of them: mbt-256." in text
    assert frontier.goal({"x": a, "y": b(21.5)}, ("x", "y")).startswith("dlfp lands within 10% of the best fixed")


def test_goal_tells_a_per_target_budget_from_a_single_one() -> None:
    a = _table([("sarathi", "fixed budget", 40, 30), ("dlfp", "adaptive", 41, 30)], settings={"sarathi": "mbt=291"})
    b = _table([("sarathi", "fixed budget", 40, 30), ("dlfp", "adaptive", 41, 30)], settings={"sarathi": "mbt=900"})
    text = frontier.goal({"x": a, "y": b}, ("x", "y"))
    assert "no single fixed budget meets" in text and "(budgets derived per target that do: sarathi)" in text
    assert frontier.goal({}, ("x",)).startswith("not testable")


def test_ttft_spread_is_over_fixed_budgets_only() -> None:
    t = _table([("stock", "fixed budget", 100, 200), ("mbt-256", "fixed budget", 40, 220),
                ("dlfp", "adaptive", 43, 900)])
    assert frontier.ttft_spread({"x": t}) == "x 200-220 ms (10% apart)"
    assert frontier.ttft_spread({}) == "no baselines run"
