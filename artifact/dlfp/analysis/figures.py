"""Figures of the book, drawn from a loaded run (:class:`dlfp.analysis.runs.RunData`) only.

Every figure carries its provenance in its title: measured (machine, vLLM build) for real
engine runs, and the paper's own numbers only where labelled "reported by the paper".
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import ticker
from matplotlib.artist import Artist

from dlfp import metrics
from dlfp.analysis.families import FAMILIES, FAMILY_COLORS, PAPER_COLOR, arm_styles, run_styles
from dlfp.analysis.labels import source_line
from dlfp.analysis.paper import PAPER, reported_itl
from dlfp.analysis.pareto import ITL, TTFT
from dlfp.analysis.pareto import frontier as pareto
from dlfp.analysis.runs import RunData
from dlfp.analysis.stats import paired
from dlfp.trials.arms import REFERENCE

MARK = "black"
"""Lines that are no arm (a cap, a target, an objective, a reference): black, dashed or dotted."""


def provenance(run: RunData) -> str:
    """One line saying where a run's numbers come from."""
    engine = run.config.engine
    partial = " (PARTIAL run: finished arms only)" if run.partial else ""
    return f"{source_line(run)}, {engine.model} {engine.dtype}{partial}"


def _pooled(run: RunData, arm: str, fn) -> np.ndarray:
    parts = [fn(run.tables[(k, arm)]) for k in run.trials_of(arm)]
    return np.concatenate(parts) if parts else np.array([])


def itl_ttft_distributions(run: RunData) -> plt.Figure:
    """ECDFs of ITL and TTFT per arm, pooled over trials, P99 marked."""
    sns.set_theme(style="whitegrid")
    styles = run_styles(run.config.arms)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panels = (("Inter-token latency", lambda t: metrics.itl_gaps(_ok_tokens(t))),
              ("Time to first token", lambda t: metrics.ttft(t["requests"])))
    for ax, (title, fn) in zip(axes, panels, strict=True):
        for arm in run.arms:
            ms = _pooled(run, arm, fn) * 1000.0
            if not len(ms):
                continue
            sns.ecdfplot(x=ms, ax=ax, label=f"{arm} (P99 {np.percentile(ms, 99):.0f} ms)",
                         color=styles[arm][0], linewidth=2)
            ax.axvline(np.percentile(ms, 99), color=styles[arm][0], linestyle=":", linewidth=1)
        ax.set_xscale("log")
        plain_log_ticks(ax, axes="x")
        ax.set_xlabel(f"{title} (ms, log scale)")
        ax.set_ylabel("fraction")
        ax.set_title(title)
        ax.legend(loc="lower right")
    fig.suptitle(f"Latency distributions, {len(run.trials)} paired trials pooled\n{provenance(run)}",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _ok_tokens(t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    ok = t["requests"].loc[t["requests"].status == "ok", "request_id"]
    return t["tokens"][t["tokens"].request_id.isin(ok)]


def long_prompt_window(run: RunData, trial: int | None = None, after_s: float = 2.5) -> tuple[float, str]:
    """The first long prompt (largest class by prompt length) that arrived while decodes ran."""
    k = run.trials[0] if trial is None else trial
    wl = sorted(run.workloads[k], key=lambda r: r.arrival_s)
    threshold = np.percentile([r.prompt_len for r in wl], 80)
    steps = run.tables[(k, "dlfp")]["steps"]
    for r in wl:
        if r.prompt_len >= threshold:
            near = steps[(steps.schedule_t >= r.arrival_s) & (steps.schedule_t < r.arrival_s + after_s)]
            if (near.prefill_tokens.gt(0) & near.decode_reqs.gt(0)).any():
                return r.arrival_s, r.request_id
    return wl[0].arrival_s, wl[0].request_id


def chunk_and_interval(run: RunData, trial: int | None = None, before_s: float = 0.3,
                       after_s: float = 2.0) -> plt.Figure:
    """Prefill tokens per step, DLFP's cap, and step intervals around a long-prompt arrival."""
    sns.set_theme(style="whitegrid")
    k = run.trials[0] if trial is None else trial
    t_arr, rid = long_prompt_window(run, k)
    styles = run_styles(run.config.arms)
    fig, (ax_tok, ax_dt) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for arm in [a for a in ("stock", "dlfp") if a in run.arms]:
        s = run.tables[(k, arm)]["steps"].sort_values("schedule_t")
        s = s.assign(t=s.schedule_t - t_arr, interval_ms=s.schedule_t.diff().shift(-1) * 1000.0)
        w = s[(s.t >= -before_s) & (s.t <= after_s)]
        ax_tok.step(w.t, w.prefill_tokens, where="post", color=styles[arm][0], label=f"{arm}: prefill tokens")
        ax_dt.plot(w.t, w.interval_ms, marker="o", markersize=3, color=styles[arm][0],
                   label=f"{arm}: scheduler-call interval")
        if arm == "dlfp":
            ax_tok.step(w.t, w.cap, where="post", color=MARK, linestyle="--", label="DLFP cap C")
            target = float(w.target_s.iloc[0]) * 1000.0 if len(w) else np.nan
            ax_dt.axhline(target, color=MARK, linestyle="--", label=f"target T* = {target:.0f} ms")
    ax_tok.set_ylabel("tokens per step")
    ax_dt.set_ylabel("interval (ms)")
    ax_dt.set_xlabel(f"seconds since {rid} arrived (trial {k})")
    for ax in (ax_tok, ax_dt):
        ax.axvline(0, color="black", linewidth=0.8)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"Chunk size and step interval around a long-prompt arrival\n{provenance(run)}", fontsize=10)
    fig.tight_layout()
    return fig


def telemetry(run: RunData, tele: dict[tuple[int, str], pd.DataFrame], trial: int | None = None) -> plt.Figure:
    """Utilization over time per arm (CPU via psutil, or GPU via pynvml when present)."""
    sns.set_theme(style="whitegrid")
    k = run.trials[0] if trial is None else trial
    styles = run_styles(run.config.arms)
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for arm in run.arms:
        t = tele[(k, arm)]
        util = t[(t.metric == "util_pct")]
        for source, part in util.groupby("source"):
            ax.plot(part.t_s, part.value, color=styles[arm][0], label=f"{arm} {source}",
                    linestyle="-" if source == "cpu" else "--")
    ax.set_xlabel(f"seconds since trial start (trial {k})")
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"Telemetry\n{provenance(run)}", fontsize=10)
    fig.tight_layout()
    return fig


def headline(rows: pd.DataFrame, run: RunData) -> plt.Figure:
    """The paired trials at a glance: per trial, stock's and DLFP's P99 ITL (left), and the P99 ITL
    reduction per trial beside the paper's as it reports them, with each side's mean and paired 95%
    interval in a last slot (right). Ours and the paper's never share a bar or a statistic."""
    sns.set_theme(style="whitegrid")
    styles = run_styles(run.config.arms)
    wide = rows.pivot(index="trial", columns="arm", values="itl_p99_ms")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.9), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.1, 1.0]})
    x = np.arange(len(wide))
    for j, arm in enumerate((REFERENCE, "dlfp")):
        drawn = left.bar(x + (j - 0.5) * 0.4, wide[arm].to_numpy(), width=0.4, color=styles[arm][0], label=arm)
        left.bar_label(drawn, fmt="%.0f", fontsize=8)
    left.set_xticks(x, [f"trial {k}" for k in wide.index])
    left.set_ylabel("P99 ITL, pooled gaps (ms)")
    left.set_title("P99 ITL per paired trial (measured)", fontsize=9)
    left.legend(loc="upper right", fontsize=8)
    ours, theirs = paired(rows, "itl_p99_ms"), reported_itl()
    n = max(len(ours["reductions_pct"]), len(theirs["reductions_pct"]))
    for j, (p, colour, label) in enumerate(((ours, FAMILY_COLORS["DLFP law"], "ours (measured)"),
                                            (theirs, PAPER_COLOR, f"the paper ({PAPER['setting']}, reported)"))):
        vals = p["reductions_pct"]
        shift = (j - 0.5) * 0.4
        right.bar(np.arange(len(vals)) + shift, vals, width=0.4, color=colour, label=label)
        lo, hi = p.get("t_lo", np.nan), p.get("t_hi", np.nan)
        err = None if np.isnan(lo) else [[p["mean_pct"] - lo], [hi - p["mean_pct"]]]
        right.errorbar([n + shift], [p["mean_pct"]], yerr=err, fmt="o", color=colour, capsize=5)
    right.axhline(0, color="black", linewidth=0.8)
    right.set_xticks(np.arange(n + 1), [*(f"trial {k}" for k in range(n)), "mean\n(95% CI)"])
    right.set_ylabel("P99 ITL reduction, stock to DLFP (%)")
    right.set_title("Reduction per trial, and the mean with its paired 95% CI", fontsize=9)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)  # below: never over a bar
    fig.suptitle(provenance(run), fontsize=9)
    return fig


def generalization(table: pd.DataFrame, title: str) -> plt.Figure:
    """Per run of :func:`dlfp.analysis.tables.generalization_table`: the P99 ITL reduction with its
    paired CI, the paper's result on Qwen3-0.6B beside it, and the signal divergence."""
    sns.set_theme(style="whitegrid")
    labels = [f"{r.device}, {r.model} TP{r.TP}\n{variant}" for r, variant in zip(table.itertuples(),
                                                                                table["DLFP variant"], strict=True)]
    y = np.arange(len(table))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.7 * len(table) + 2), sharey=True,
                                      gridspec_kw={"width_ratios": [2, 1]})
    lo, hi = table["ITL CI lo (%)"].to_numpy(), table["ITL CI hi (%)"].to_numpy()
    mean = table["ITL reduction (%)"].to_numpy()
    err = np.vstack([mean - np.where(np.isnan(lo), mean, lo), np.where(np.isnan(hi), mean, hi) - mean])
    left.errorbar(mean, y, xerr=err, fmt="o", color=FAMILY_COLORS["DLFP law"], capsize=4,
                  label="ours: mean, paired 95% CI")
    left.axvspan(*PAPER["ci_pct"], color=PAPER_COLOR, alpha=0.25,
                 label=f"reported by the paper ({PAPER['setting']}): CI")
    left.axvline(0, color="black", linewidth=0.8)
    left.set_yticks(y, labels)
    left.invert_yaxis()
    left.set_xlabel("P99 ITL reduction, stock to DLFP (%)")
    left.legend(loc="lower left", fontsize=8)
    right.barh(y, table["signal divergence"].to_numpy(), color=FAMILY_COLORS["stock"])
    right.set_xlabel("signal divergence\n(median |interval - cadence| / cadence)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


FRONTIER_LINE = "frontier (Pareto-efficient fixed budgets)"


def frontier(tables: dict[str, pd.DataFrame], title: str) -> plt.Figure:
    """Per target: P99 ITL against P99 TTFT of every arm (colour by family, shade and marker by arm
    within it: :func:`dlfp.analysis.families.arm_styles`), the line through the Pareto-efficient
    fixed token budgets (:func:`dlfp.analysis.pareto.frontier`; a line
    through every budget would zig-zag through dominated ones), and the run's ITL objective. One
    legend below the panels keys the arms: labels printed at the points overlap where arms tie."""
    sns.set_theme(style="whitegrid")
    n = len(tables)
    cols = min(3, n)
    rows = -(-n // cols)
    fams = _arm_families(tables)
    labels = {a: f"{a} ({f})" for a, f in fams.items()}
    legend_rows = -(-(len(labels) + 2) // (2 * cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows + 0.22 * legend_rows + 0.3), squeeze=False,
                             layout="constrained")
    styles = arm_styles(fams.items())
    for ax, (target, t) in zip(axes.flat, tables.items(), strict=False):
        front = pareto(t[t.kind == "fixed budget"])
        ax.plot(front[TTFT], front[ITL], color=FAMILY_COLORS["fixed budget"], linewidth=1, zorder=1,
                label=FRONTIER_LINE)
        for _, r in t.iterrows():
            colour, marker = styles[r.arm]
            ax.scatter(r[TTFT], r[ITL], marker=marker, color=colour, edgecolors="black", linewidths=0.4, s=40,
                       zorder=2, label=labels[r.arm])
        ax.axhline(t["itl objective (ms)"].iloc[0], color=MARK, linestyle="--", linewidth=1,
                   label="ITL objective")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("P99 TTFT (ms, log)")
        ax.set_ylabel("P99 ITL, pooled gaps (ms, log)")
        ax.set_title(target, fontsize=9)
        plain_log_ticks(ax)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles = _handles(list(axes.flat)[:n])
    order = [FRONTIER_LINE, "ITL objective", *labels.values()]
    fig.legend([handles[k] for k in order if k in handles], [k for k in order if k in handles],
               loc="outside lower center", ncol=2 * cols, fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def _arm_families(tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Each arm's family, grouped by family (:data:`FAMILIES` order) and in run order within one: the
    order of the key the whole figure shares."""
    fams = {a: f for t in tables.values() for a, f in zip(t.arm, t.family, strict=True)}
    return {a: fams[a] for a in sorted(fams, key=lambda a: FAMILIES.index(fams[a]))}  # stable within a family


def _handles(axes: list[plt.Axes]) -> dict[str, Artist]:
    """One artist per legend label over all panels (the first drawn)."""
    found: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    return found


_SUBS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0), tuple(float(m) for m in range(1, 10)))
"""Round multiples of each decade, sparsest first, that a log axis may carry as plain labels."""


def log_ticks(lo: float, hi: float, least: int = 3, most: int = 8) -> list[float]:
    """Tick positions for a log axis spanning ``lo``..``hi`` whose plain labels cannot collide: the
    sparsest of :data:`_SUBS` giving at least ``least`` ticks (thinned to at most ``most`` where even
    the decades are more), or, over a span too narrow for any (1240-1380 ms), evenly spaced round
    numbers. Matplotlib's own choice there labels minor ticks ("1.24x10^3 1.26x10^3"), which overlap."""
    decades = np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
    for subs in _SUBS:
        ticks = [float(m * 10.0**d) for d in decades for m in subs if lo <= m * 10.0**d <= hi]
        if len(ticks) >= least:
            return ticks[:: -(-len(ticks) // most)]
    return [float(x) for x in ticker.MaxNLocator(nbins=4).tick_values(lo, hi) if lo <= x <= hi]


def plain_log_ticks(ax: plt.Axes, axes: str = "xy") -> None:
    """Fix the log ``axes`` ("x", "y" or both) ticks at :func:`log_ticks` of their final limits,
    labelled as plain numbers, minor ticks unlabelled."""
    chosen = [(a, lim) for name, a, lim in (("x", ax.xaxis, ax.get_xlim()), ("y", ax.yaxis, ax.get_ylim()))
              if name in axes]
    for axis, (lo, hi) in chosen:
        axis.set_major_locator(ticker.FixedLocator(log_ticks(lo, hi)))
        axis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
        axis.set_minor_formatter(ticker.NullFormatter())


def regime_boundary(sweeps: dict[str, pd.DataFrame], title: str) -> plt.Figure:
    """DLFP's P99 ITL reduction (mean and paired CI per run) against the share of stock's
    inter-token gaps that were stalls, one series per target: where the gain turns into a loss."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, (target, points) in enumerate(sweeps.items()):
        pts = points.sort_values("prefill stalls stock (% of gaps)")
        x = pts["prefill stalls stock (% of gaps)"].to_numpy()
        mean = pts["ITL reduction (%)"].to_numpy()
        lo, hi = pts["ITL CI lo (%)"].to_numpy(), pts["ITL CI hi (%)"].to_numpy()
        err = np.vstack([mean - np.where(np.isnan(lo), mean, lo), np.where(np.isnan(hi), mean, hi) - mean])
        ax.errorbar(x, mean, yerr=err, fmt="os^D"[i % 4], linestyle=("-", "--", ":", "-.")[i % 4],
                    color=FAMILY_COLORS["DLFP law"], capsize=4, linewidth=0.8, label=f"{target}: mean, paired 95% CI")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.axvline(1.0, color=MARK, linestyle=":", linewidth=1, label="1% of gaps: what a pooled P99 sees")
    ax.set_xscale("log")
    plain_log_ticks(ax, axes="x")
    ax.set_xlabel("stock's prefill stalls (% of inter-token gaps above T*, as observed in each run, log)")
    ax.set_ylabel("P99 ITL reduction, stock to DLFP (%)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
