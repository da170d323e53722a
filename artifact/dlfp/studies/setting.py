"""Which setting a deployer should use, from the capacity study's table (:mod:`dlfp.studies.capacity`).

Kept apart from the module that turns traces into points: the points are stamped with the sha256 of
the code that computes them (:data:`dlfp.studies.capacity.POINT_CODE`), and how a table of capacities
is read (which arm is best, which budget one would pick for every target) does not decide a point, so
changing it must not make hours of stamped points stale.
"""

from __future__ import annotations

import math

import pandas as pd

from dlfp.studies.capacity_ratio import compare, family_confidence

FIXED_BUDGET = "mbt-"
"""The fixed-budget arms' name prefix (``mbt-<max_num_batched_tokens>``)."""
DEFAULTS = "dlfp"
"""DLFP with its default parameters and ``itl_slo_ms`` at the level's SLO, as a user would set it."""


def best_single_budget(table: pd.DataFrame) -> str | None:
    """The fixed budget a deployer would pick without knowing the target: the one whose capacity,
    as a share of each target and level's best arm, is highest on average (None without one).

    The average is over the target and level pairs that ran every fixed budget of the study: a target
    with a reduced arm set (the CPU engine, a second workload) would otherwise judge each budget over
    other targets, and a budget missing where every arm fares badly would win by its absence. Where no
    pair ran them all, the pairs that ran the most of them decide, among the budgets all of those ran."""
    shares = _shares(table)
    fixed = shares[shares.arm.str.startswith(FIXED_BUDGET)]
    if fixed.empty:
        return None
    held = fixed.groupby(["target", "level"])["arm"].transform("nunique")
    widest = fixed[held == held.max()]
    pairs = widest.groupby("arm")["target"].transform("size")  # an arm is one row per target and level
    common = widest[pairs == widest.groupby(["target", "level"]).ngroups]
    return str(common.groupby("arm")["share"].mean().idxmax()) if len(common) else None


def _shares(table: pd.DataFrame) -> pd.DataFrame:
    """Each row's capacity as a share of its target and level's highest (a censored row counts at
    its bound: at least the top rate, or 0 below the lowest)."""
    t = table.copy()
    best = t.groupby(["target", "level"])["capacity_rps"].transform("max")
    t["share"] = (t["capacity_rps"] / best).where(best > 0)
    return t


NONE_MEETS = "none meets the SLOs"
"""The *best* of a target and level that ranks nothing: fewer than two of its trials (of a run of two or
more) had any arm meet the SLOs even at the lightest rate (a trial where every arm failed there says
nothing about their order, and an interval needs two trials). Such a pair is named (:func:`unranked`)
and left out of every count."""


def informative(trials: pd.DataFrame) -> pd.DataFrame:
    """One target and level's trial capacities without the trials in which every arm failed at the lowest
    rate (censored below): those rank nothing, and paired with them every arm would tie."""
    failed = trials.groupby("trial")["censored"].transform(lambda c: bool(c.eq("below").all()))
    return trials[~failed.astype(bool)]


def ranks(trials: pd.DataFrame) -> bool:
    """Whether one target and level's trials can rank its arms: two or more informative trials
    (:func:`informative`), or, in a run of one trial (a quick ``dlfp plan``: a point estimate, asked for),
    that one."""
    return informative(trials)["trial"].nunique() >= min(2, trials["trial"].nunique())


def judged_pairs(trials: pd.DataFrame) -> int:
    """How many target and SLO-level pairs rank their arms (:func:`ranks`): the size of the family the
    which-setting and goal statements are corrected for (at least 1)."""
    return max(1, sum(ranks(g) for _, g in trials.groupby(["target", "level"], sort=False)))


def which_setting(table: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Per target and SLO level: the arm with the highest capacity, the arms the trials cannot tell
    from it (:func:`indistinguishable`, at the confidence corrected for every pair judged), and how DLFP's
    defaults and the best single fixed budget across all targets (:func:`best_single_budget`) compare with
    it: their capacity ratio to the best, geometric mean over trials and interval
    (:mod:`dlfp.studies.capacity_ratio`).

    A best arm whose capacity is censored above (every point met the SLOs) is "at least" the top
    rate and may tie others there: they are listed together. Trials in which every arm failed at the
    lowest rate are left out (:func:`informative`); a pair left with fewer than two is :data:`NONE_MEETS`
    and ranks nothing. Columns: target, level, arms (how many ran: a target with a reduced arm set names
    the best of fewer), ranked, trials (informative ones), best (the arms), best_rps, censored, tied (arms
    the trials cannot tell from the best), defaults_share and its interval defaults_ratio, budget,
    budget_share and budget_ratio (NaN / '' where the target did not run that arm), confidence."""
    shares = _shares(table)
    budget = best_single_budget(table)
    confidence = family_confidence(judged_pairs(trials))
    rows = []
    for (target, level), g in shares.groupby(["target", "level"], sort=False):
        pair = trials[(trials.target == target) & (trials.level == level)]
        own = informative(pair)
        ranked = ranks(pair) and g["capacity_rps"].max() > 0
        top = g[g["share"] == 1.0] if ranked else g.iloc[0:0]
        lookup = g.set_index("arm")["share"]
        best = str(top["arm"].iloc[0]) if len(top) else None
        tied = indistinguishable(own, best, confidence) if best is not None and len(top) == 1 else []

        def against(arm: str | None, best: str | None = best, own: pd.DataFrame = own) -> str:
            if arm is None or best is None or arm == best or arm not in set(own.arm):
                return ""
            return compare(own, arm, best, confidence).words()

        rows.append({
            "target": target, "level": level, "arms": g["arm"].nunique(), "ranked": ranked,
            "trials": int(own["trial"].nunique()),
            "best": ", ".join(sorted(top["arm"])) or NONE_MEETS,
            "best_rps": float(top["capacity_rps"].max()) if len(top) else 0.0,
            "censored": "above" if len(top) and top["censored"].eq("above").any() else "none",
            "tied": ", ".join(tied),
            "defaults_share": float(lookup.get(DEFAULTS, math.nan)) if ranked else math.nan,
            "defaults_ratio": against(DEFAULTS),
            "budget": budget,
            "budget_share": float(lookup.get(budget, math.nan)) if budget and ranked else math.nan,
            "budget_ratio": against(budget),
            "confidence": confidence,
        })
    return pd.DataFrame(rows)


def indistinguishable(trials: pd.DataFrame, best: str, confidence: float = 0.95) -> list[str]:
    """The arms of one target and level (:func:`trial_capacities`) that the trials cannot place below
    ``best``: the interval of their capacity ratio to it, paired by seed on the log scale, with censored
    trials at their most favourable bound (:func:`dlfp.studies.capacity_ratio.compare`), reaches 1. An arm
    every trial of which failed at the lowest rate where ``best`` did not is placed below it, however wide
    the others' spread; one that met the SLOs at the top rate with ``best`` ties it. With three trials the
    interval is wide: naming one arm best is a point estimate, and this says how far it is one."""
    out = []
    for arm in sorted(set(trials.arm) - {best}):
        r = compare(trials, arm, best, confidence)
        if r.n < 2 or not r.below(1.0):  # fewer than two paired trials cannot place it below
            out.append(arm)
    return out


def standing(table: pd.DataFrame, which: pd.DataFrame) -> pd.DataFrame:
    """Per arm, over the target and SLO-level pairs it ran where some arm met the SLOs: on how many its
    capacity was the highest or one the trials cannot tell from it (``best`` or ``tied`` in
    :func:`which_setting`'s rows), and on how many it was detectably below the best. A deployer without a
    measurement of their own target asks which arm was never detectably beaten; an arm that ran on fewer
    pairs (a reduced arm set) was put to fewer tests, so both counts are given. A pair where no arm met the
    SLOs tests nothing and is left out of every count (:func:`unranked`). Rows: most pairs without a
    detectable loss first."""
    top = {(r.target, r.level): {*r.best.split(", "), *filter(None, str(r.tied).split(", "))}
           for r in which.itertuples() if r.ranked}
    rows = []
    for arm, g in table.groupby("arm"):
        held = [arm in top[pair] for pair in zip(g.target, g.level, strict=True) if pair in top]
        rows.append({"arm": arm, "pairs run": len(held), "best or tied": sum(held),
                     "detectably below": len(held) - sum(held)})
    out = pd.DataFrame(rows, columns=["arm", "pairs run", "best or tied", "detectably below"])
    return out.sort_values(["detectably below", "best or tied", "arm"], ascending=[True, False, True],
                           ignore_index=True)


def share_grid(table: pd.DataFrame, which: pd.DataFrame) -> pd.DataFrame:
    """Per ranked target and SLO-level pair (:func:`which_setting`) and arm it ran: the arm's capacity as a share
    of the pair's best (point estimate, a censored capacity at its bound) and whether the trials can place it
    below the best (``below``: False for the best and for every arm :func:`indistinguishable` from it). The
    deployer's figure at a glance: a high share that is not ``below`` is as good as the best there. Pairs that
    rank nothing are left out (:func:`unranked` names them)."""
    top = {(r.target, r.level): {*r.best.split(", "), *filter(None, str(r.tied).split(", "))}
           for r in which.itertuples() if r.ranked}
    shares = _shares(table)
    shares = shares[[pair in top for pair in zip(shares.target, shares.level, strict=True)]]
    return pd.DataFrame({
        "target": shares.target, "level": shares.level, "arm": shares.arm, "family": shares.family,
        "share": shares.share.astype(float),
        "below": [arm not in top[(t, lv)] for t, lv, arm in zip(shares.target, shares.level, shares.arm, strict=True)],
    }).reset_index(drop=True)


def unranked(which: pd.DataFrame) -> list[str]:
    """The target and SLO-level pairs that rank nothing (:data:`NONE_MEETS`), ``target (level)``: named,
    never counted."""
    return [f"{r.target} ({r.level})" for r in which.itertuples() if not r.ranked]
