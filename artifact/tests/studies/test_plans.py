"""The studies beyond the paper: their plans, the frontier and regret, the goal sentence, the
regime boundary and the explanations verdict (pure logic; the runs themselves are slow and
committed)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.analysis.stats import direction
from dlfp.studies import explanations, frontier, plans
from dlfp.studies.boundary import boundary
from dlfp.studies.frontier import ITL, REGRET, TTFT

# --- plans -------------------------------------------------------------------------------------


def test_plans_parse_and_pair_every_arm_on_one_workload() -> None:
    base = plans.baselines()
    assert [str(d) for d, _ in base] == ["cpu-tiny", *plans.MODELED_TARGETS]
    for _, cfg in base:
        assert cfg.arm_names == tuple(a["name"] for a in plans.BASELINE_ARMS)
        assert len(cfg.seeds) == plans.TRIALS
    sens = dict(plans.sensitivity())
    assert set(sens) >= {plans.Path("params")}
    for target, shares in plans.STALL_SHARES.items():
        for share in shares:
            cfg = sens[plans.Path(f"stalls-{target}-{share}")]
            assert len(cfg.seeds) == plans.REGIME_TRIALS  # a sweep point needs an interval with 2 df
            assert cfg.arm_names == ("stock", "dlfp")
    expl = [str(d) for d, _ in plans.explanations()]
    assert {f"{v}-{t}" for v in ("fast-host", "rare-stalls") for t in plans.PAPER_TARGETS} == set(expl)


def test_only_names_an_unknown_entry() -> None:
    with pytest.raises(ValueError, match="not in the baselines plan"):
        plans.main(["baselines", "--out", "/nonexistent", "--only", "gpu-qwen3-9b", "--list"])


def test_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown study target"):
        plans.target_config("tpu-qwen3-8b", {})


# --- frontier, regret and the goal ---------------------------------------------------------------


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


# --- the regime boundary -----------------------------------------------------------------------


def _sweep(points: list[tuple[float, float, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(points, columns=["prefill stalls stock (% of gaps)", "ITL reduction (%)",
                                         "ITL CI lo (%)", "ITL CI hi (%)"])


def test_boundary_in_words() -> None:
    text = boundary(_sweep([(2.0, 40, 20, 60), (0.3, 5, -20, 30), (0.6, 10, -5, 25), (4.0, 50, 30, 70)]))
    assert "a detectable gain at 2%, 4% of gaps" in text and "no detectable effect at 0.3%, 0.6%" in text
    assert "the gain becomes detectable between 0.6% and 2%" in text
    assert "no boundary inside the sweep" in boundary(_sweep([(0.3, 40, 20, 60), (2.0, 50, 30, 70)]))
    worse = boundary(_sweep([(0.3, -40, -60, -20), (2.0, 5, -30, 40)]))
    assert "no detectable gain anywhere" in worse and "detectably worse than stock at 0.3%" in worse
    assert "one trial (no interval) at 1%" in boundary(_sweep([(1.0, 5, math.nan, math.nan)]))
    assert boundary(_sweep([])) == "no sweep runs"


@given(st.lists(st.tuples(st.floats(0.01, 50), st.floats(-100, 100), st.floats(0, 60), st.floats(0, 60)),
                min_size=1, max_size=8))
def test_boundary_names_every_point_once(raw: list[tuple[float, float, float, float]]) -> None:
    """Every sweep point appears in exactly one class, and the class follows its interval."""
    points = [(s, m, m - lo, m + hi) for s, m, lo, hi in raw]
    text = boundary(_sweep(points))
    kinds = [direction(lo, hi) for _, _, lo, hi in points]
    for k, phrase in (("gain", "a detectable gain at"), ("none", "no detectable effect at"),
                      ("loss", "a detectable loss at")):
        assert (phrase in text) == (k in kinds)


# --- explanations ------------------------------------------------------------------------------


def _cells(works: tuple[float, float], fails: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {explanations.WORKS: {"t_lo": works[0], "t_hi": works[1]},
            **{t: {"t_lo": fails[0], "t_hi": fails[1]} for t in explanations.FAILS}}


def test_reproduces_the_pattern_only_when_0_6b_works_and_the_others_fail() -> None:
    assert explanations.reproduces(_cells((10, 40), (-20, 5))) == "reproduces the pattern"
    assert explanations.reproduces(_cells((-5, 40), (-20, 5))).startswith("does not: no detectable benefit on 0.6B")
    assert "a benefit on qwen3-8b not ruled out" in explanations.reproduces(_cells((10, 40), (20, 60)))
    assert explanations.reproduces({explanations.WORKS: {"t_lo": 1, "t_hi": 2}}).startswith("not testable")


def test_verdict_groups_the_variants() -> None:
    expl = pd.DataFrame({"(a) lag": {explanations.PATTERN_ROW: "reproduces the pattern"},
                         "(b) abs": {explanations.PATTERN_ROW: "does not: 0.6B shows no benefit"},
                         "(c) host": {explanations.PATTERN_ROW: "not testable (a setting is missing)"}})
    assert explanations.verdict(expl) == ("reproduce the paper's pattern: (a) lag; do not reproduce it: (b) abs (0.6B "
                                          "shows no benefit); not testable yet: (c) host.")


def test_ttft_spread_is_over_fixed_budgets_only() -> None:
    t = _table([("stock", "fixed budget", 100, 200), ("mbt-256", "fixed budget", 40, 220),
                ("dlfp", "adaptive", 43, 900)])
    assert frontier.ttft_spread({"x": t}) == "x 200-220 ms (10% apart)"
    assert frontier.ttft_spread({}) == "no baselines run"


def test_lateness_note_names_late_units_and_tolerates_odd_manifests() -> None:
    from types import SimpleNamespace

    from dlfp.analysis.labels import lateness_note

    run = SimpleNamespace(manifest={"units": [
        {"trial": 1, "arm": "dlfp", "send_lateness_ms": {"p99": 109.1}},
        {"trial": 0, "arm": "stock", "send_lateness_ms": {"p99": 0.3}},
        {"trial": 0, "arm": "x", "send_lateness_ms": {"p99": True}}, "junk", {"send_lateness_ms": None}]})
    assert lateness_note(run) == "late sends (p99 over 10 ms): trial-1/dlfp 109 ms"
    assert lateness_note(SimpleNamespace(manifest={})).startswith("every unit sent its requests within 10 ms")


def test_explanations_from_runs_that_are_missing_says_not_testable(tmp_path) -> None:
    (tmp_path / "a100-qwen3-0.6b").mkdir()  # a folder without a manifest is a run that did not finish
    expl = explanations.from_runs(tmp_path, tmp_path / "absent")
    assert (expl.drop(explanations.PATTERN_ROW) == "not rendered").all().all()
    assert explanations.verdict(expl).startswith("not testable yet: (a) paper's law")
