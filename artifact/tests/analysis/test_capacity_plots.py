"""The capacity study's figures (``dlfp.analysis.capacity_plots``) from synthetic tables."""

from __future__ import annotations

import pandas as pd

from dlfp.analysis.capacity_plots import bars, family_best, sweep
from dlfp.studies.capacity import capacity_table


def _points() -> pd.DataFrame:
    rows = []
    arms = (("stock", "stock", 2.0), ("mbt-256", "fixed budget", 4.0), ("mbt-512", "fixed budget", 3.0),
            ("dlfp", "DLFP law", 3.5), ("dlfp-slo", "SLO controller", 5.0))
    for arm, fam, cap in arms:
        for level in ("tight", "relaxed"):
            for trial in (0, 1):
                for rate in (1.0, 2.0, 4.0, 8.0):
                    rows.append({"target": "a100-qwen3-0.6b", "level": level, "arm": arm, "family": fam,
                                 "trial": trial, "rate_rps": rate, "itl_p99_ms": 10.0 * rate / (cap + trial),
                                 "ttft_p99_ms": 1.0, "itl_slo_ms": 10.0, "ttft_slo_ms": 100.0, "bound_rps": 9.0,
                                 "span_s": 4.0, "goodput_rps": min(rate, cap),
                                 "source": "simulated (cost profile a100)"})
    return pd.DataFrame(rows)


def test_each_family_is_drawn_by_its_best_arm() -> None:
    points = _points()
    best = family_best(points, capacity_table(points))
    assert set(best.groupby("family").arm.first()) == {"stock", "mbt-256", "dlfp", "dlfp-slo"}


def test_the_figures_draw_one_line_per_family_with_the_slo_and_the_bound() -> None:
    points = _points()
    table = capacity_table(points)
    fig = sweep(points, table, "tight", "capacity sweep (simulated)")
    top = fig.axes[0]
    labels = top.get_legend_handles_labels()[1]
    assert labels == ["stock (stock)", "fixed budget (mbt-256)", "DLFP law (dlfp)", "SLO controller (dlfp-slo)",
                      "ITL SLO"]
    assert [t.get_text() for t in top.get_yticklabels() if t.get_text()]  # plain labels on the log axis
    assert [line.get_linestyle() for line in fig.axes[1].lines if line.get_label() == "capacity bound"] == [":"]
    fig2 = bars(table, "capacity per arm (simulated)")  # arms by family (stock first, at the bottom), then name
    assert [t.get_text() for t in fig2.axes[0].get_yticklabels()] == ["stock", "mbt-256", "mbt-512", "dlfp", "dlfp-slo"]
