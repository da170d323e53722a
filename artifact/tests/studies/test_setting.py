"""Which setting to use (dlfp.studies.setting): the best arm per target, the arms the trials cannot tell
from it, and the single budget one would pick for every target."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dlfp.studies.setting import best_single_budget, indistinguishable, unranked, which_setting
from tests.studies.capacity_trials import trial


def _table(rows: list[tuple[str, str, str, float, str]]) -> pd.DataFrame:
    return pd.DataFrame([{"target": t, "level": lv, "arm": a, "capacity_rps": c, "censored": cen}
                         for t, lv, a, c, cen in rows])


def _trials(table: pd.DataFrame, spread: float = 0.0) -> pd.DataFrame:
    """Three trials per table row, at its capacity times 1 - spread, 1, 1 + spread (a constant ratio between
    arms whatever the spread), censored as the row is."""
    return pd.DataFrame([trial(r["target"], r["level"], r["arm"], k, r["capacity_rps"] * (1 + (k - 1) * spread),
                               r["censored"]) for r in table.to_dict("records") for k in range(3)])


def test_arms_the_trials_cannot_tell_from_the_best_are_named() -> None:
    # Paired by trial: mbt-512 is 0.75-0.83 of mbt-256 in every trial (told apart however close); dlfp's
    # ratio swings across 1 (a tie); stock is far under; an arm that failed at the lowest rate in one trial
    # and sat just under the best in the others is placed below, not beside it.
    trials = pd.DataFrame([trial("t", "tight", arm, k, c) for arm, caps in
                           {"mbt-256": [4.0, 5.0, 6.0], "mbt-512": [3.0, 4.0, 5.0], "dlfp": [5.0, 3.0, 6.5],
                            "stock": [1.0, 1.2, 0.9], "crashed": [3.6, 4.6, 0.0]}.items()
                           for k, c in enumerate(caps)])
    assert indistinguishable(trials, "mbt-256") == ["dlfp"]
    # one trial: no interval, so nothing is placed below the best
    assert indistinguishable(trials[trials.trial == 0], "mbt-256") == ["crashed", "dlfp", "mbt-512", "stock"]


def test_which_setting_names_the_best_arm_and_how_far_the_defaults_and_one_budget_are() -> None:
    table = _table([
        ("a", "tight", "stock", 1.0, "none"), ("a", "tight", "mbt-256", 4.0, "none"),
        ("a", "tight", "mbt-512", 3.0, "none"), ("a", "tight", "dlfp", 2.0, "none"),
        ("b", "tight", "stock", 2.0, "none"), ("b", "tight", "mbt-256", 1.0, "none"),
        ("b", "tight", "mbt-512", 4.0, "none"), ("b", "tight", "dlfp", 5.0, "none"),
    ])
    # Shares of each target's best: mbt-256 1.0 and 0.2 (mean 0.6), mbt-512 0.75 and 0.8 (mean 0.775).
    assert best_single_budget(table) == "mbt-512"
    w = which_setting(table, _trials(table)).set_index("target")
    assert w.loc["a", "best"] == "mbt-256" and w.loc["a", "best_rps"] == 4.0 and w.loc["a", "arms"] == 4
    # Target b without mbt-256: the single budget is chosen where both ran (a), and b has no share of it.
    cut = table[~((table.target == "b") & (table.arm == "mbt-256"))]
    reduced = which_setting(cut, _trials(cut)).set_index("target")
    assert reduced.loc["b", "arms"] == 3 and reduced.loc["b", "budget"] == "mbt-256"
    assert math.isnan(reduced.loc["b", "budget_share"]) and reduced.loc["a", "budget_share"] == 1.0
    assert w.loc["a", "defaults_share"] == pytest.approx(0.5) and w.loc["a", "budget_share"] == pytest.approx(0.75)
    assert w.loc["b", "best"] == "dlfp" and w.loc["b", "defaults_share"] == 1.0
    assert w.loc["a", "tied"] == "" and w.loc["b", "tied"] == ""  # identical trials: every gap is real
    wide = which_setting(table, _trials(table, spread=0.5)).set_index("target")
    assert wide.loc["a", "tied"] == ""  # a constant paired ratio is told apart however wide each arm's spread
    noisy = _trials(table, spread=0.5)
    noisy.loc[(noisy.arm == "mbt-512") & (noisy.trial == 0), "capacity_rps"] = 9.0
    assert which_setting(table, noisy).set_index("target").loc["a", "tied"] == "mbt-512"
    assert w.loc["a", "defaults_ratio"] == "0.50 (0.50-0.50)" and w.loc["b", "defaults_ratio"] == ""  # dlfp is b's best
    assert (w.confidence == 1 - 0.05 / 2).all()  # two pairs judged: Bonferroni


def test_the_single_budget_is_judged_only_where_every_budget_ran() -> None:
    # Where both ran: mbt-256's shares of the best 1.0 and 0.68 (mean 0.84), mbt-512's 0.75 and 1.0 (0.875).
    full = [("a", "tight", "mbt-256", 4.0, "none"), ("a", "tight", "mbt-512", 3.0, "none"),
            ("b", "tight", "mbt-256", 3.0, "none"), ("b", "tight", "mbt-512", 4.4, "none")]
    assert best_single_budget(_table(full)) == "mbt-512"
    # A target that ran only mbt-512, where it is far from the best arm, must not count against it
    # (over every pair it would average 0.62, and mbt-256 win by its absence) ...
    bad = [("c", "tight", "dlfp", 10.0, "none"), ("c", "tight", "mbt-512", 1.0, "none")]
    assert best_single_budget(_table(full + bad)) == "mbt-512"
    # ... nor one that ran only mbt-256, where it is the best arm, for mbt-256 (0.89 over every pair).
    good = [("c", "tight", "dlfp", 1.0, "none"), ("c", "tight", "mbt-256", 10.0, "none")]
    assert best_single_budget(_table(full + good)) == "mbt-512"
    # The widest pairs ran different budgets: no budget ran on all of them, so none is named.
    disjoint = [("a", "tight", "mbt-256", 4.0, "none"), ("b", "tight", "mbt-512", 3.0, "none")]
    assert best_single_budget(_table(disjoint)) is None
    assert best_single_budget(_table([("a", "tight", "dlfp", 4.0, "none")])) is None


def test_arms_tied_at_the_top_rate_are_named_together_and_nothing_meeting_the_slos_says_so() -> None:
    table = _table([("a", "relaxed", "stock", 6.0, "above"), ("a", "relaxed", "mbt-256", 6.0, "above"),
                    ("a", "relaxed", "dlfp", 3.0, "none"),
                    ("b", "tight", "stock", 0.0, "below"), ("b", "tight", "dlfp", 0.0, "below")])
    which = which_setting(table, _trials(table))
    w = which.set_index("target")
    assert w.loc["a", "best"] == "mbt-256, stock" and w.loc["a", "censored"] == "above"
    assert w.loc["b", "best"] == "none meets the SLOs" and w.loc["b", "best_rps"] == 0.0
    assert not w.loc["b", "ranked"] and unranked(which) == ["b (tight)"] and w.loc["b", "trials"] == 0
    assert w.loc["a", "confidence"] == pytest.approx(0.95)  # the one pair that ranks anything


def test_trials_where_every_arm_failed_rank_nothing() -> None:
    """A pair where only one trial had any arm meet the SLOs (the CPU engine at its tight SLOs) is named
    and left out, not counted as a tie for every arm."""
    caps = {"dlfp": [0.0, 0.0, 2.0], "stock": [0.0, 0.0, 1.5]}
    rows = [trial("c", "tight", arm, k, cap) for arm, values in caps.items() for k, cap in enumerate(values)]
    trials = pd.DataFrame(rows)
    table = _table([("c", "tight", "dlfp", 2.0 / 3, "mixed"), ("c", "tight", "stock", 0.5, "mixed")])
    w = which_setting(table, trials).set_index("target")
    assert not w.loc["c", "ranked"] and w.loc["c", "best"] == "none meets the SLOs" and w.loc["c", "trials"] == 1
    # a run of one trial (a quick dlfp plan) ranks on that one: a point estimate, asked for
    one = which_setting(table, trials[trials.trial == 2]).set_index("target")
    assert one.loc["c", "ranked"] and one.loc["c", "best"] == "dlfp" and one.loc["c", "tied"] == "stock"


def test_standing_counts_the_pairs_where_an_arm_was_not_detectably_beaten() -> None:
    from dlfp.studies.setting import standing

    table = _table([(t, "tight", arm, cap, "none") for t, caps in (("a", (1.0, 4.0, 3.9)), ("b", (2.0, 1.0, 5.0)))
                    for arm, cap in zip(("stock", "mbt-256", "dlfp"), caps, strict=True)]
                   + [("c", "tight", "stock", 0.0, "below"), ("c", "tight", "dlfp", 0.0, "below")])
    trials = _trials(table)
    # dlfp ties mbt-256 on a only when its paired gap swings sign across trials.
    trials.loc[(trials.target == "a") & (trials.arm == "dlfp"), "capacity_rps"] = [5.0, 3.0, 3.7]
    s = standing(table, which_setting(table, trials)).set_index("arm")
    assert s.loc["dlfp"].tolist() == [2, 2, 0]  # tied on a, best on b; c, where nothing met the SLOs, not counted
    assert s.loc["mbt-256"].tolist() == [2, 1, 1] and s.loc["stock"].tolist() == [2, 0, 2]
    assert list(s.index) == ["dlfp", "mbt-256", "stock"]
    # With identical trials every gap is real: dlfp is detectably below mbt-256 on a.
    assert standing(table, which_setting(table, _trials(table))).set_index("arm").loc["dlfp", "detectably below"] == 1


def test_the_share_grid_gives_each_arms_share_of_the_best_and_whether_the_trials_place_it_below() -> None:
    from dlfp.studies.setting import share_grid

    table = _table([(t, "tight", arm, cap, "none") for t, caps in (("a", (1.0, 4.0, 3.9)), ("b", (2.0, 1.0, 5.0)))
                    for arm, cap in zip(("stock", "mbt-256", "dlfp"), caps, strict=True)]
                   + [("c", "tight", "stock", 0.0, "below"), ("c", "tight", "dlfp", 0.0, "below")])
    table["family"] = table.arm
    trials = _trials(table)
    trials.loc[(trials.target == "a") & (trials.arm == "dlfp"), "capacity_rps"] = [5.0, 3.0, 3.7]
    grid = share_grid(table, which_setting(table, trials)).set_index(["target", "arm"])
    assert set(grid.index.get_level_values("target")) == {"a", "b"}  # c ranks nothing: left out
    assert grid.loc[("a", "mbt-256"), "share"] == 1.0 and not grid.loc[("a", "mbt-256"), "below"]
    assert grid.loc[("a", "dlfp"), "share"] == pytest.approx(3.9 / 4.0) and not grid.loc[("a", "dlfp"), "below"]
    assert grid.loc[("a", "stock"), "share"] == pytest.approx(0.25) and grid.loc[("a", "stock"), "below"]
    assert grid.loc[("b", "mbt-256"), "share"] == pytest.approx(0.2) and grid.loc[("b", "mbt-256"), "below"]
