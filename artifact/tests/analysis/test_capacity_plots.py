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
                                 "top_rate_rps": 8.0,
                                 "span_s": 4.0, "send_late_p99_ms": 1.0, "goodput_rps": min(rate, cap),
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
    top, bottom = fig.axes[0], fig.axes[1]
    assert bottom.get_legend_handles_labels()[1] == ["stock: stock", "fixed budget: mbt-256", "DLFP law: dlfp",
                                                     "SLO controller: dlfp-slo"]
    assert [t.get_text() for t in top.get_yticklabels() if t.get_text()]  # plain labels on the log axis
    # Four families' lines, then the level's ITL SLO (dashed, top) and the capacity bound (dotted, bottom).
    assert [line.get_linestyle() for line in top.lines] == ["-"] * 4 + ["--"]
    assert [line.get_linestyle() for line in bottom.lines] == ["-"] * 4 + [":"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["ITL SLO", "capacity bound"]
    fig2 = bars(table, "capacity per arm (simulated)")  # arms by family (stock first, at the bottom), then name
    assert [t.get_text() for t in fig2.axes[0].get_yticklabels()] == ["stock", "mbt-256", "mbt-512", "dlfp", "dlfp-slo"]
    assert not fig2.axes[0].get_legend() and len(fig2.legends) == 1  # one legend for the figure, not per panel
    below = table.assign(censored="below", bracket_high_rps=1.0)
    texts = [t.get_text() for t in bars(below, "nothing meets the SLOs").axes[0].texts]
    assert texts and all(t == " < 1 (fails at the lowest rate)" for t in texts)  # said, not left blank


def test_seven_targets_wrap_into_rows_of_three() -> None:
    points = pd.concat([_points().assign(target=f"t{k}") for k in range(7)], ignore_index=True)
    table = capacity_table(points)
    fig = sweep(points, table, "tight", "seven targets")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 3 * 3 * 2 and len(shown) == 7 * 2  # three rows of targets, two panels each
    assert [ax.get_title() for ax in shown[:3]] == [f"t{k} (simulated)" for k in range(3)]
    fig2 = bars(table, "seven targets")
    assert len([ax for ax in fig2.axes if ax.get_visible()]) == 7 and len(fig2.axes) == 9


def test_the_share_figure_has_a_cell_per_arm_and_pair_and_marks_the_detectable_losses() -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    from dlfp.analysis.capacity_plots import shares

    grid = pd.DataFrame([
        {"target": "a", "level": "tight", "arm": "stock", "family": "stock", "share": 0.25, "below": True},
        {"target": "a", "level": "tight", "arm": "mbt-256", "family": "fixed budget", "share": 1.0, "below": False},
        {"target": "b", "level": "relaxed", "arm": "mbt-256", "family": "fixed budget", "share": 0.9, "below": False},
    ])
    fig = shares(grid, "t")
    panels = {ax.get_title(): ax for ax in fig.axes}  # a colorbar beside each panel, untitled
    tight, relaxed = panels["tight SLOs"], panels["relaxed SLOs"]
    assert sorted(t.get_text() for t in tight.texts) == ["0.25", "1.00"]
    assert [t.get_text() for t in relaxed.texts] == ["0.90"]  # stock did not run on b: no cell
    assert [tuple(line.get_xydata()[0]) for line in tight.lines] == [(0.36, -0.22)]  # stock on a, below the best
    assert not relaxed.lines
    assert [t.get_text() for t in tight.get_xticklabels()] == ["a", "b\n(ranks nothing)"]
    plt.close(fig)
