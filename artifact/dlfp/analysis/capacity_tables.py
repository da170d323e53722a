"""The capacity study's tables as a reader reads them, from ``capacity.parquet``
(:func:`dlfp.studies.capacity.capacity_table`).

A list of every arm's capacity on every target is a grid, not a sentence: per SLO level one row per
arm (in family order, the order of every figure) and one column per target, each cell a capacity;
and beside it, per target and level, what the capacity is measured against (the SLOs, the rates
swept, the bound, the overload a point could let pass), so the numbers of the grid need no prose.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dlfp.analysis.families import FAMILY_COLORS
from dlfp.analysis.labels import LATE_SEND_MS, source_kind


def cell(row: Any) -> str:
    """One capacity as a reader needs it: the estimate with its interval, or the bound a censored
    sweep gives (at least the top rate; below the lowest)."""
    if row.censored == "above":
        return f"≥ {row.capacity_rps:.3g}"
    if row.censored == "below":
        return f"< {row.bracket_high_rps:.3g}"
    if row.censored == "mixed":
        return f"{row.capacity_rps:.3g} (some trials censored)"
    if pd.isna(row.ci_low_rps):
        return f"{row.capacity_rps:.3g}"
    return f"{row.capacity_rps:.3g} ({max(0.0, row.ci_low_rps):.3g}-{row.ci_high_rps:.3g})"


def column(target: str, table: pd.DataFrame) -> str:
    """A target's column header: its name and where its numbers come from (measured or simulated)."""
    return f"{target} ({source_kind(table.loc[table.target == target, 'source'].iloc[0])})"


def family_order(table: pd.DataFrame) -> list[str]:
    """The arms of ``table`` (columns ``arm``, ``family``) in family order, the order of every figure
    (:data:`~dlfp.analysis.families.FAMILY_COLORS`), then by name."""
    order = {f: i for i, f in enumerate(FAMILY_COLORS)}
    family = table.groupby("arm")["family"].first()
    return sorted(family.index, key=lambda a: (order[family[a]], a))


def by_target(table: pd.DataFrame, level: str) -> pd.DataFrame:
    """Capacity (requests/s, mean and 95% interval over trials) at one SLO level: one row per arm,
    in family order, one column per target; an arm a target did not run is blank."""
    t = table[table.level == level]
    grid = pd.DataFrame(index=pd.Index(family_order(t), name="arm"))
    for target, g in t.groupby("target", sort=False):
        grid[column(str(target), table)] = g.set_index("arm").apply(cell, axis=1)
    return grid.fillna("")


def design(table: pd.DataFrame) -> pd.DataFrame:
    """Per target and SLO level, what its capacities are measured against, and how many of its points
    had their arrival process disturbed (requests sent late: another process on the machine, or a client
    that cannot keep up with the rate)."""
    facts = table.groupby(["target", "level"], sort=False).first().reset_index()
    points = table.groupby(["target", "level"], sort=False)[["late_points", "n_points"]].sum().to_numpy()
    return pd.DataFrame({
        "target": [column(t, table) for t in facts.target], "SLO level": facts.level,
        "ITL SLO (ms)": facts.itl_slo_ms.map("{:.3g}".format),
        "TTFT SLO (ms)": facts.ttft_slo_ms.map("{:.3g}".format),
        "rates swept (req/s)": [f"{lo:.3g}-{hi:.3g}" for lo, hi in zip(facts.min_rate_rps, facts.max_rate_rps,
                                                                        strict=True)],
        "bound (req/s)": facts.bound_rps.map("{:.3g}".format),
        "overload that can pass (%)": (100 * facts.resolution).map("{:.2g}".format),
        f"points sent late (p99 > {LATE_SEND_MS:g} ms)": [f"{late} of {n}" for late, n in points],
    })


def findings(which: pd.DataFrame) -> pd.DataFrame:
    """What the *which setting* table (:func:`dlfp.studies.setting.which_setting`) found, one row per
    SLO level: which arms had the highest capacity on how many targets, how many arms the trials could
    not tell from it, and the range of DLFP's defaults' and the best single budget's share of it (the
    grid and the which-setting table carry the per-target numbers). A table, not a sentence: the
    sentence it replaced held ten numbers."""
    rows = []
    for level, g in which.groupby("level", sort=False):
        met = g[g.ranked]
        counts = met.best.value_counts()
        tied = met.tied.map(lambda s: len(s.split(", ")) if s else 0)
        rows.append({
            "SLO level": level,
            "highest capacity (targets)": ", ".join(f"{arm} ({n} of {len(g)})" for arm, n in counts.items())
            or f"none ranked (0 of {len(g)})",
            "arms the trials cannot tell from it": _range(tied, "{:.0f}"),
            "DLFP's defaults reach": _range(100 * met.defaults_share, "{:.0f}%"),
            f"best single budget ({g.budget.iloc[0]}) reaches": _range(100 * met.budget_share, "{:.0f}%"),
        })
    return pd.DataFrame(rows)


def _range(values: pd.Series, form: str) -> str:
    """``lo-hi`` over the finite values, one value where they round alike, '' where there are none."""
    v = values.dropna()
    if v.empty:
        return ""
    lo, hi = form.format(v.min()), form.format(v.max())
    return lo if lo == hi else f"{lo.rstrip('%')}-{hi}"
