"""The SLO controller's capacity goal, judged from the capacity study (trials paired by seed).

The goal set for ``dlfp-slo``: a capacity within 10% of the best fixed token budget *for that target*
(an oracle tuned per target), and above the best single fixed budget across all targets
(:func:`~dlfp.studies.setting.best_single_budget`) on at least one target. Each is a verdict that can
come out either way: per target and SLO level the ratio of ``dlfp-slo``'s capacity to the budget's,
trial by trial on the log scale, and its interval across trials decide it
(:func:`dlfp.studies.capacity_ratio.compare`: a censored trial at its most favourable bound, the
confidence corrected for the number of pairs judged, since "within 10% everywhere" is one statement
about all of them):

* *within 10%* where the interval's low end is at least :data:`WITHIN`, *short* where its high end is
  below it, *undecided* where the interval straddles it (three trials give wide intervals);
* *above the single budget* where the interval lies above 1, *below* where it lies under 1,
  *undecided* otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dlfp.analysis.capacity_tables import column
from dlfp.studies.capacity_ratio import RatioInterval, compare, family_confidence
from dlfp.studies.setting import FIXED_BUDGET, best_single_budget, informative, judged_pairs, ranks

ARM = "dlfp-slo"
"""The controller judged."""
WITHIN = 0.9
"""The goal: a capacity at least this share of the per-target best fixed budget's."""
NO_BUDGET = "none meets the SLOs"
"""The best budget where no fixed budget meets the SLOs even at the lightest rate: then ``dlfp-slo`` is
*within* where it does, and nothing is judged where it does not either (a share of zero is no test)."""


def verdict(r: RatioInterval, threshold: float, above: str, below: str) -> str:
    """``above`` where ``r``'s interval lies at or over ``threshold``, ``below`` where it lies under it,
    else undecided (also without an interval)."""
    if r.n < 2 or math.isnan(r.lo) or math.isnan(r.hi):
        return "undecided (no interval)"
    if r.at_least(threshold):
        return above
    return below if r.below(threshold) else "undecided"


def goal_table(table: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Per target (named with where its numbers come from) and SLO level where :data:`ARM` ran: the
    target's best fixed budget (highest mean capacity), the ratio to it with its interval and verdict,
    and the same against the best single budget across all targets; ``confidence``, each interval's."""
    single = best_single_budget(table)
    confidence = family_confidence(judged_pairs(trials))
    none = RatioInterval(math.nan, math.nan, math.nan, 0, 0, confidence)
    rows = []
    for (target, level), g in table.groupby(["target", "level"], sort=False):
        fixed = g[g.arm.str.startswith(FIXED_BUDGET)]
        if ARM not in set(g.arm) or fixed.empty:
            continue
        pair = trials[(trials.target == target) & (trials.level == level)]
        own = informative(pair)
        if not ranks(pair):  # fewer than two trials where any arm met the SLOs: nothing to judge, not counted
            continue
        vs_single = compare(own, ARM, single, confidence) if single else none
        if fixed.capacity_rps.max() > 0:
            best = str(fixed.sort_values("capacity_rps", ascending=False, kind="stable").arm.iloc[0])
            vs_best = compare(own, ARM, best, confidence)
            within, n = verdict(vs_best, WITHIN, "within", "short"), vs_best.n
        else:  # naming one of several zeros "best" would be arbitrary, and a share of zero means nothing
            best, vs_best, n = NO_BUDGET, none, own.trial.nunique()
            within = "within" if g.loc[g.arm == ARM, "capacity_rps"].iloc[0] > 0 else "undecided (nothing to judge)"
        rows.append({
            "target": column(str(target), table), "level": level, "best budget": best,
            "vs best budget": vs_best.words(), "within 10%": within,
            "single budget": single, "vs single budget": vs_single.words(),
            "above single": verdict(vs_single, 1.0, "above", "below"), "trials": n, "confidence": confidence,
        })
    return pd.DataFrame(rows)


def sentence(goal: pd.DataFrame) -> str:
    """What the goal table says, counted (the table carries the values)."""
    if goal.empty:
        return f"No capacity run has {ARM} beside a fixed budget yet."
    n = len(goal)
    within = np.sum(goal["within 10%"] == "within")
    short = np.sum(goal["within 10%"] == "short")
    above = goal[goal["above single"] == "above"]
    where = (", ".join(f"{t} ({lv})" for t, lv in zip(above.target, above.level, strict=True))
             if len(above) else "no target and level")
    first, second = halves(goal)
    return (f"Against each target's best fixed budget, {ARM} is within 10% on {within} and short of it on {short} "
            f"of {n} target and SLO-level pairs (the rest undecided at the trials' {goal['confidence'].iloc[0]:.1%} "
            f"interval, corrected for the pairs judged); above the best "
            f"single budget ({goal['single budget'].iloc[0]}) on {where}. On these runs the goal's first half "
            f"(within 10% everywhere) is {first}, its second (above the single budget somewhere) {second}.")


def halves(goal: pd.DataFrame) -> tuple[str, str]:
    """The goal's two halves over the pairs of ``goal`` (:func:`goal_table`): *within 10% on every
    pair* is met where every pair is within, not met where one is short, else undecided; *above the
    single budget on at least one* is met where one pair is above, not met where every pair is below,
    else undecided."""
    within = goal["within 10%"]
    first = "met" if within.eq("within").all() else "not met" if within.eq("short").any() else "undecided"
    above = goal["above single"]
    second = "met" if above.eq("above").any() else "not met" if above.eq("below").all() else "undecided"
    return first, second
