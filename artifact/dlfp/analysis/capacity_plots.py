"""The capacity study's figures, from its two tables (``points.parquet``, ``capacity.parquet``: built
by :mod:`dlfp.studies.capacity`, each arm's family from :mod:`dlfp.analysis.families`).

One colour per arm family, the same as in every figure (:mod:`dlfp.analysis.families`); log axes
carry plain numbers
(:func:`dlfp.analysis.figures.plain_log_ticks`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from dlfp.analysis.families import FAMILY_COLORS
from dlfp.analysis.figures import plain_log_ticks
from dlfp.analysis.labels import source_kind


def family_best(points: pd.DataFrame, capacity: pd.DataFrame) -> pd.DataFrame:
    """The points of each family's best arm per target and level (highest capacity; ties: the first
    in the table): one line per family keeps a figure readable."""
    best = (capacity.sort_values("capacity_rps", ascending=False, kind="stable")
            .drop_duplicates(["target", "level", "family"])[["target", "level", "family", "arm"]])
    return points.merge(best, on=["target", "level", "family", "arm"])


def sweep(points: pd.DataFrame, capacity: pd.DataFrame, level: str, title: str) -> plt.Figure:
    """Per target (columns): P99 ITL (top) and goodput (bottom) against the arrival rate at one SLO
    level, mean over trials, one line per family's best arm (named in the legend of its panel), the
    level's ITL SLO dashed, the capacity bound dotted on the goodput panel."""
    sns.set_theme(style="whitegrid")
    pts = family_best(points[points.level == level], capacity[capacity.level == level])
    targets = list(dict.fromkeys(pts.target))
    fig, axes = plt.subplots(2, max(1, len(targets)), figsize=(max(6.4, 3.6 * len(targets)), 6.4), squeeze=False,
                             layout="constrained")
    for col, target in enumerate(targets):
        top, bottom = axes[0, col], axes[1, col]
        t = pts[pts.target == target]
        for fam, g in t.groupby("family", sort=False):
            m = g.groupby("rate_rps")[["itl_p99_ms", "goodput_rps"]].mean()
            label = f"{fam} ({g.arm.iloc[0]})"
            top.plot(m.index, m.itl_p99_ms, marker="o", markersize=3, color=FAMILY_COLORS[fam], label=label)
            bottom.plot(m.index, m.goodput_rps, marker="o", markersize=3, color=FAMILY_COLORS[fam], label=label)
        top.axhline(t.itl_slo_ms.iloc[0], color="black", linestyle="--", linewidth=1, label="ITL SLO")
        bottom.axhline(t.bound_rps.iloc[0], color="black", linestyle=":", linewidth=1, label="capacity bound")
        top.set_title(f"{target} ({source_kind(t.source.iloc[0])})", fontsize=9)
        top.set_yscale("log")
        top.set_ylabel("P99 ITL, pooled gaps (ms, log)")
        bottom.set_ylabel("goodput (req/s within SLOs)")
        bottom.set_xlabel("arrival rate (requests/s)")
        plain_log_ticks(top, axes="y")
        top.legend(fontsize=6, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return fig


def bars(capacity: pd.DataFrame, title: str) -> plt.Figure:
    """Per target (panels): each arm's capacity at both levels (bars, mean over trials, 95% interval
    where every trial's capacity was interpolated; a censored one hatched), coloured by family, with
    each level's capacity bound as a vertical line."""
    sns.set_theme(style="whitegrid")
    targets = list(dict.fromkeys(capacity.target))
    n = max(1, len(targets))
    arms_max = max((capacity[capacity.target == t].arm.nunique() for t in targets), default=1)
    fig, axes = plt.subplots(1, n, figsize=(max(6.4, 4.0 * n), 0.32 * arms_max + 1.8), squeeze=False,
                             layout="constrained")
    for ax, target in zip(axes[0], targets, strict=False):
        t = capacity[capacity.target == target]
        order = {f: i for i, f in enumerate(FAMILY_COLORS)}
        arms = sorted(dict.fromkeys(t.arm), key=lambda a: (order[t.loc[t.arm == a, "family"].iloc[0]], a))
        y = np.arange(len(arms))
        for k, (level, shift) in enumerate((("tight", -0.2), ("relaxed", 0.2))):
            lv = t[t.level == level].set_index("arm").reindex(arms)
            for yi, (_, r) in zip(y, lv.iterrows(), strict=True):
                if pd.isna(r.capacity_rps):
                    continue
                # A capacity is never negative: an interval reaching below zero is drawn from zero.
                err = None if pd.isna(r.ci_low_rps) else [[r.capacity_rps - max(0.0, r.ci_low_rps)],
                                                          [r.ci_high_rps - r.capacity_rps]]
                ax.barh(yi + shift, r.capacity_rps, height=0.38, color=FAMILY_COLORS[r.family], alpha=1.0 - 0.45 * k,
                        hatch="//" if r.censored != "none" else None, xerr=err, capsize=2, edgecolor="white")
            bound = t[t.level == level].bound_rps
            if len(bound):
                ax.axvline(bound.iloc[0], color="black", linestyle="--" if k == 0 else ":", linewidth=1,
                           label=f"bound, {level}")
        ax.set_yticks(y, arms, fontsize=7)
        ax.set_xlim(left=0)
        ax.set_xlabel("capacity (requests/s)\ndark: tight SLOs, light: relaxed; hatched: censored")
        ax.set_title(f"{target} ({source_kind(t.source.iloc[0])})", fontsize=9)
        ax.legend(fontsize=6, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return fig
