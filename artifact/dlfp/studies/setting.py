"""Which setting a deployer should use, from the capacity study's table (:mod:`dlfp.studies.capacity`).

Kept apart from the module that turns traces into points: the points are stamped with the sha256 of
the code that computes them (:data:`dlfp.studies.capacity.POINT_CODE`), and how a table of capacities
is read (which arm is best, which budget one would pick for every target) does not decide a point, so
changing it must not make hours of stamped points stale.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dlfp.analysis.stats import t_ci

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


def which_setting(table: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """Per target and SLO level: the arm with the highest capacity, the arms the trials cannot tell
    from it (:func:`indistinguishable`), and how DLFP's defaults and the best single fixed budget across
    all targets (:func:`best_single_budget`) compare with it.

    A best arm whose capacity is censored above (every point met the SLOs) is "at least" the top
    rate and may tie others there: they are listed together. Columns: target, level, arms (how many
    ran: a target with a reduced arm set names the best of fewer), best (the arms), best_rps, censored,
    tied (arms within noise of the best), defaults_share, budget, budget_share (capacity / best's; NaN
    where the target did not run that arm)."""
    shares = _shares(table)
    budget = best_single_budget(table)
    rows = []
    for (target, level), g in shares.groupby(["target", "level"], sort=False):
        top = g[g["share"] == 1.0] if g["share"].notna().any() else g.iloc[0:0]
        lookup = g.set_index("arm")["share"]
        own = trials[(trials.target == target) & (trials.level == level)]
        tied = indistinguishable(own, str(top["arm"].iloc[0])) if len(top) == 1 else []
        rows.append({
            "target": target, "level": level, "arms": g["arm"].nunique(),
            "best": ", ".join(sorted(top["arm"])) or "none meets the SLOs",
            "best_rps": float(top["capacity_rps"].max()) if len(top) else 0.0,
            "censored": "above" if len(top) and top["censored"].eq("above").any() else "none",
            "tied": ", ".join(tied),
            "defaults_share": float(lookup.get(DEFAULTS, math.nan)),
            "budget": budget, "budget_share": float(lookup.get(budget, math.nan)) if budget else math.nan,
        })
    return pd.DataFrame(rows)


def indistinguishable(trials: pd.DataFrame, best: str) -> list[str]:
    """The arms of one target and level (:func:`trial_capacities`) whose capacity the trials cannot
    tell from ``best``'s: the paired 95% t interval of ``best`` minus the arm, trial by trial (paired by
    seed), reaches zero. A censored trial counts at its bound (the top rate, or 0), so an arm every
    trial of which met the SLOs at the top rate ties a best that did too. With three trials the
    interval is wide: naming one arm best is a point estimate, and this says how far it is one."""
    cap = trials.pivot_table(index="trial", columns="arm", values="capacity_rps")
    out = []
    for arm in sorted(c for c in cap.columns if c != best):
        d = (cap[best] - cap[arm]).dropna().to_numpy(dtype=float)
        if len(d) >= 2 and (np.all(d == 0) or t_ci(d)[1] <= 0):
            out.append(arm)
    return out


def standing(table: pd.DataFrame, which: pd.DataFrame) -> pd.DataFrame:
    """Per arm, over the target and SLO-level pairs it ran: on how many its capacity was the highest or
    one the trials cannot tell from it (``best`` or ``tied`` in :func:`which_setting`'s rows), and on how
    many it was detectably below the best. A deployer without a measurement of their own target asks
    which arm was never detectably beaten; an arm that ran on fewer pairs (a reduced arm set) was put to
    fewer tests, so both counts are given. Where no arm met the SLOs every arm counts as tied there.
    Rows: most pairs without a detectable loss first."""
    top: dict[tuple[str, str], set[str] | None] = {}
    for r in which.itertuples():
        top[(r.target, r.level)] = (None if r.best_rps <= 0 else
                                    {*r.best.split(", "), *filter(None, str(r.tied).split(", "))})
    rows = []
    for arm, g in table.groupby("arm"):
        held = [top.get(pair) is None or arm in top[pair] for pair in zip(g.target, g.level, strict=True)]
        rows.append({"arm": arm, "pairs run": len(held), "best or tied": sum(held),
                     "detectably below": len(held) - sum(held)})
    out = pd.DataFrame(rows, columns=["arm", "pairs run", "best or tied", "detectably below"])
    return out.sort_values(["detectably below", "best or tied", "arm"], ascending=[True, False, True],
                           ignore_index=True)
