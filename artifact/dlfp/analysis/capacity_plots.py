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
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import LineStyleType

from dlfp.analysis.capacity_tables import family_order
from dlfp.analysis.families import FAMILY_COLORS
from dlfp.analysis.figures import plain_log_ticks
from dlfp.analysis.labels import source_kind


def family_best(points: pd.DataFrame, capacity: pd.DataFrame) -> pd.DataFrame:
    """The points of each family's best arm per target and level (highest capacity; ties: the first
    in the table): one line per family keeps a figure readable."""
    best = (capacity.sort_values("capacity_rps", ascending=False, kind="stable")
            .drop_duplicates(["target", "level", "family"])[["target", "level", "family", "arm"]])
    return points.merge(best, on=["target", "level", "family", "arm"])


PER_ROW = 3
"""Targets per row of panels: at 1280 px a row of three stays legible, and seven targets wrap."""


def _grid(n: int, rows_per_target: int, width: float, height: float) -> tuple[plt.Figure, np.ndarray]:
    """A figure of ``n`` targets, :data:`PER_ROW` to a row, each ``rows_per_target`` panels tall;
    the axes as (target row x panel, column), unused ones hidden."""
    cols = max(1, min(PER_ROW, n))
    rows = -(-max(1, n) // cols)
    fig, axes = plt.subplots(rows * rows_per_target, cols, figsize=(max(6.4, width * cols), height * rows),
                             squeeze=False, layout="constrained")
    for k in range(n, rows * cols):
        for j in range(rows_per_target):
            axes[(k // cols) * rows_per_target + j, k % cols].set_visible(False)
    return fig, axes


def sweep(points: pd.DataFrame, capacity: pd.DataFrame, level: str, title: str) -> plt.Figure:
    """Per target: P99 ITL (top) and goodput (bottom) against the arrival rate at one SLO level, mean
    over trials, one line per family's best arm (named in the goodput panel's legend), the level's ITL
    SLO dashed, the capacity bound dotted on the goodput panel. A line ends at the last rate every trial
    ran: a sweep stops above an arm's failure (:mod:`dlfp.trials.stopping`), and a mean over the trials
    that went on would show only those that passed below."""
    sns.set_theme(style="whitegrid")
    pts = family_best(points[points.level == level], capacity[capacity.level == level])
    targets = list(dict.fromkeys(pts.target))
    fig, axes = _grid(len(targets), 2, 3.9, 6.0)
    for k, target in enumerate(targets):
        row, col = divmod(k, PER_ROW)
        top, bottom = axes[2 * row, col], axes[2 * row + 1, col]
        t = pts[pts.target == target]
        for fam, g in t.groupby("family", sort=False):
            by_rate = g.groupby("rate_rps")
            m = by_rate[["itl_p99_ms", "goodput_rps"]].mean()
            m = m[by_rate["trial"].nunique() == g["trial"].nunique()]  # a mean over the trials that ran: biased
            top.plot(m.index, m.itl_p99_ms, marker="o", markersize=3, color=FAMILY_COLORS[fam])
            bottom.plot(m.index, m.goodput_rps, marker="o", markersize=3, color=FAMILY_COLORS[fam],
                        label=f"{fam}: {g.arm.iloc[0]}")
        top.axhline(t.itl_slo_ms.iloc[0], color="black", linestyle="--", linewidth=1)
        bottom.axhline(t.bound_rps.iloc[0], color="black", linestyle=":", linewidth=1)
        top.set_title(f"{target} ({source_kind(t.source.iloc[0])})", fontsize=9)
        top.set_yscale("log")
        top.set_ylabel("P99 ITL (ms, log)")
        bottom.set_ylabel("goodput (req/s)")
        bottom.set_xlabel("arrival rate (requests/s)")
        plain_log_ticks(top, axes="y")
        bottom.legend(fontsize=6, loc="upper left")
    fig.legend(handles=[Line2D([], [], color="black", linestyle="--", linewidth=1, label="ITL SLO"),
                        Line2D([], [], color="black", linestyle=":", linewidth=1, label="capacity bound")],
               loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def bars(capacity: pd.DataFrame, title: str) -> plt.Figure:
    """Per target (panels): each arm's capacity at both levels (bars, mean over trials, 95% interval
    where every trial's capacity was interpolated; a censored one hatched), coloured by family, with
    each level's capacity bound as a vertical line; one legend for the figure says which is which."""
    sns.set_theme(style="whitegrid")
    targets = list(dict.fromkeys(capacity.target))
    arms_max = max((capacity[capacity.target == t].arm.nunique() for t in targets), default=1)
    fig, axes = _grid(len(targets), 1, 4.2, 0.3 * arms_max + 1.4)
    for k, target in enumerate(targets):
        ax = axes[k // PER_ROW, k % PER_ROW]
        t = capacity[capacity.target == target]
        arms = family_order(t)
        y = np.arange(len(arms))
        for j, (level, shift) in enumerate((("tight", -0.2), ("relaxed", 0.2))):
            lv = t[t.level == level].set_index("arm").reindex(arms)
            for yi, (_, r) in zip(y, lv.iterrows(), strict=True):
                if pd.isna(r.capacity_rps):
                    continue
                if r.censored == "below":  # no bar to draw: say so where it would start
                    ax.text(0, yi + shift, f" < {r.bracket_high_rps:.3g} (fails at the lowest rate)", fontsize=5,
                            va="center", color=FAMILY_COLORS[r.family])
                    continue
                # A capacity is never negative: an interval reaching below zero is drawn from zero.
                err = None if pd.isna(r.ci_low_rps) else [[r.capacity_rps - max(0.0, r.ci_low_rps)],
                                                          [r.ci_high_rps - r.capacity_rps]]
                ax.barh(yi + shift, r.capacity_rps, height=0.38, color=FAMILY_COLORS[r.family], alpha=1.0 - 0.45 * j,
                        hatch="//" if r.censored != "none" else None, xerr=err, capsize=2, edgecolor="white")
            bound = t[t.level == level].bound_rps
            if len(bound):
                ax.axvline(bound.iloc[0], color="black", linestyle=BOUND_STYLES[level], linewidth=1)
        ax.set_yticks(y, arms, fontsize=7)
        ax.set_xlim(left=0)
        ax.set_xlabel("capacity (requests/s)")
        ax.set_title(f"{target} ({source_kind(t.source.iloc[0])})", fontsize=9)
    grey = FAMILY_COLORS["stock"]
    fig.legend(handles=[Patch(color=grey, label="tight SLOs (lower, dark bar)"),
                        Patch(color=grey, alpha=0.55, label="relaxed SLOs (upper, light bar)"),
                        Patch(facecolor="white", edgecolor=grey, hatch="//", label="censored at an end of the sweep"),
                        *(Line2D([], [], color="black", linestyle=BOUND_STYLES[lv], linewidth=1, label=f"bound, {lv}")
                          for lv in BOUND_STYLES)],
               loc="outside lower center", ncols=5, fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


BOUND_STYLES: dict[str, LineStyleType] = {"tight": "--", "relaxed": ":"}
"""How each level's capacity bound is drawn on the capacity figure."""


def shares(grid: pd.DataFrame, title: str) -> plt.Figure:
    """The deployer's answer at a glance: one panel per SLO level, one row per arm (family order), one column per
    target, each cell the arm's capacity as a share of that target and level's best arm (``grid``:
    :func:`dlfp.studies.setting.share_grid`). A cell with a red triangle is one the paired trials place below
    the best; every other filled cell, the best's included, cannot be told from it. Blank: an arm the target did
    not run, or a whole column where that level ranks nothing. (Marking the detectable losses rather than the
    ties keeps the figure readable where few trials tie most arms; a panel per level keeps the numbers legible
    in a page's width.)"""
    sns.set_theme(style="white")
    arms = family_order(grid)
    targets = list(dict.fromkeys(grid.target))
    levels = [lv for lv in ("tight", "relaxed") if lv in set(grid.level)]
    fig, axes = plt.subplots(len(levels), 1, figsize=(0.85 * len(targets) + 2.4, (0.3 * len(arms) + 1.4) * len(levels)),
                             layout="constrained", squeeze=False)
    for ax, level in zip(axes[:, 0], levels, strict=True):
        value = np.full((len(arms), len(targets)), np.nan)
        below = np.zeros_like(value, dtype=bool)
        for r in grid[grid.level == level].itertuples():
            i, j = arms.index(r.arm), targets.index(r.target)
            value[i, j], below[i, j] = r.share, r.below
        image = ax.imshow(value, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        for i, j in zip(*np.nonzero(~np.isnan(value)), strict=True):
            ax.text(j, i, f"{value[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if value[i, j] > 0.55 else "white")
            if below[i, j]:
                ax.plot(j + 0.36, i - 0.22, marker="v", markersize=5, color="red", linestyle="none")
        ranked = set(grid[grid.level == level].target)
        ax.set_yticks(range(len(arms)), arms, fontsize=8)
        ax.set_xticks(range(len(targets)), [t if t in ranked else f"{t}\n(ranks nothing)" for t in targets],
                      fontsize=8, rotation=30, ha="right")
        ax.set_title(f"{level} SLOs", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8, label="capacity / best arm's")
    fig.legend(handles=[Line2D([], [], marker="v", color="red", linestyle="none", markersize=6,
                               label="detectably below the best (paired trials)")],
               loc="outside lower center", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
