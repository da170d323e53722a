"""``dlfp.analysis.figures``: every figure the notebooks draw (``figures.<name>`` in
``notebooks/*.ipynb``) renders from the committed runs, plots the numbers the traces give, and
carries its provenance: measured (machine and vLLM build, from the manifest) or simulated (the
cost profile), and the paper's own numbers only where labelled "reported by the paper".

Runs read (never written): ``data/runs/cpu-default``, ``data/runs/generalization-cpu``,
``data/runs/generalization-sim``, the ``cpu-tiny`` run of ``data/runs/study-baselines`` and the
``stalls-cpu-tiny-*`` sweep of ``data/runs/study-sensitivity`` (subsets of the modeled study and of
the sweep, named below, keep the module fast). Agg backend; every figure is closed.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from dlfp.analysis import figures
from dlfp.analysis.labels import source_line
from dlfp.analysis.runs import RunData, load_run, target_s
from dlfp.analysis.tables import generalization_table
from dlfp.paths import REPO_ROOT
from dlfp.trials.runfolder import MANIFEST

RUNS = REPO_ROOT / "data" / "runs"
NOTEBOOK_FIGURES = {"chunk_and_interval", "frontier", "generalization", "headline", "itl_ttft_distributions",
                    "provenance", "regime_boundary", "telemetry"}


def run_dirs(root: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in root.glob(pattern) if (p / MANIFEST).is_file())


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


FRONTIER_ARMS = ("stock", "mbt-256", "mbt-512", "mbt-1024", "mbt-2048", "cap", "dlfp")
"""Of the baselines run's 14 arms: the fixed budgets the frontier joins, a fixed cap and DLFP."""
SIM_RUNS = ("a100-qwen3-0.6b-tp1", "a100-qwen3-8b-tp2")
"""Two of the modeled study's runs (one TP size each): enough for the figure, and fast."""
SWEEP = ("stalls-cpu-tiny-0.0025", "stalls-cpu-tiny-0.01", "stalls-cpu-tiny-0.04")
"""Three points of the CPU regime sweep: a quarter of, at and four times the 1% a pooled P99 sees."""


@pytest.fixture(scope="module")
def sim_table() -> pd.DataFrame:
    return generalization_table([load_run(RUNS / "generalization-sim" / name) for name in SIM_RUNS])


def renders(fig: plt.Figure) -> None:
    """The figure becomes a PNG, as ``dlfp.book.notebook.show`` embeds it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40, metadata={"Software": None})
    assert buf.getvalue().startswith(b"\x89PNG")


def legend(ax: plt.Axes) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_notebooks_use_these_figures() -> None:
    """Every figure the book draws, in a notebook's cell or in a section module it calls (dlfp.book)."""
    call = re.compile(r"\bfigures\.([a-z_]+)\(")
    used = set()
    for nb in (REPO_ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                used |= set(call.findall("".join(cell["source"])))
    for module in (REPO_ROOT / "artifact" / "dlfp" / "book").glob("*.py"):
        used |= set(call.findall(module.read_text(encoding="utf-8")))
    assert used == NOTEBOOK_FIGURES  # a new figure in a notebook gets a test here
    assert all(callable(getattr(figures, name)) for name in used)


def test_provenance_is_the_manifests(run: RunData) -> None:
    assert figures.provenance(run) == f"{source_line(run)}, qwen3-tiny float32"
    assert figures.provenance(run).startswith("measured: 2-core ")
    manifest = dataclasses.replace(run.manifest, status="interrupted")
    partial = dataclasses.replace(run, manifest=manifest)
    assert figures.provenance(partial).endswith("qwen3-tiny float32 (PARTIAL run: finished arms only)")
    sim = load_run(run_dirs(RUNS / "generalization-sim")[0], tables=("requests",))
    assert figures.provenance(sim).startswith("simulated: cost profile ")


def _ok_gaps_ms(t: dict[str, pd.DataFrame]) -> np.ndarray:
    ok = t["requests"].request_id[t["requests"].status == "ok"]
    out = []
    for _, g in t["tokens"][t["tokens"].request_id.isin(ok)].groupby("request_id"):
        d = np.diff(g.sort_values("index").t_s.to_numpy())
        out.extend(d[d > 0])
    return 1000 * np.asarray(out)


def test_latency_distributions(run: RunData) -> None:
    fig = figures.itl_ttft_distributions(run)
    renders(fig)
    assert fig.get_suptitle() == f"Latency distributions, 3 paired trials pooled\n{figures.provenance(run)}"
    itl_ax, ttft_ax = fig.axes
    assert (itl_ax.get_title(), ttft_ax.get_title()) == ("Inter-token latency", "Time to first token")
    fig.canvas.draw()
    for ax in fig.axes:  # plain numbers on the log axes, never "10^2"
        ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        assert len(ticks) >= 2 and all(re.fullmatch(r"\d+(\.\d+)?", t) for t in ticks), ticks
    assert itl_ax.get_xscale() == "log"
    for arm, itl_label, ttft_label in zip(run.arms, legend(itl_ax), legend(ttft_ax), strict=True):
        gaps = np.concatenate([_ok_gaps_ms(run.tables[(k, arm)]) for k in run.trials])
        req = pd.concat([run.tables[(k, arm)]["requests"] for k in run.trials])
        ttft = 1000 * (req.first_token_s - req.arrival_s)[req.status == "ok"].to_numpy()
        assert itl_label == f"{arm} (P99 {np.percentile(gaps, 99):.0f} ms)"
        assert ttft_label == f"{arm} (P99 {np.percentile(ttft, 99):.0f} ms)"


def test_chunk_and_interval(run: RunData) -> None:
    t_arr, rid = figures.long_prompt_window(run)
    wl = {r.request_id: r for r in run.workloads[0]}
    assert wl[rid].prompt_len >= np.percentile([r.prompt_len for r in wl.values()], 80)  # a long prompt
    assert wl[rid].arrival_s == t_arr
    fig = figures.chunk_and_interval(run)
    renders(fig)
    tok_ax, dt_ax = fig.axes
    assert fig.get_suptitle().endswith("\n" + figures.provenance(run))
    assert dt_ax.get_xlabel() == f"seconds since {rid} arrived (trial 0)"
    assert "DLFP cap C" in legend(tok_ax)
    assert f"target T* = {1000 * target_s(run.config):.0f} ms" in legend(dt_ax)  # 35.8 ms: "36 ms"


def test_headline_shows_each_trial_and_keeps_ours_and_the_papers_apart(run: RunData, rows: pd.DataFrame) -> None:
    from matplotlib.colors import to_hex

    from dlfp.analysis.families import FAMILY_COLORS, PAPER_COLOR
    from dlfp.analysis.stats import paired

    fig = figures.headline(rows, run)
    renders(fig)
    per_trial, reduction = fig.axes
    assert fig.get_suptitle() == figures.provenance(run)
    assert per_trial.get_title() == "P99 ITL per paired trial (measured)"
    wide = rows.pivot(index="trial", columns="arm", values="itl_p99_ms")
    heights = [b.get_height() for b in per_trial.patches]
    assert heights == pytest.approx([*wide["stock"], *wide["dlfp"]])  # stock's bars, then DLFP's
    assert legend(per_trial) == ["stock", "dlfp"]
    by_hand = (100 * (wide["stock"] - wide["dlfp"]) / wide["stock"]).tolist()
    ours, theirs = reduction.containers[0], reduction.containers[2]  # bars; [1] is ours' error bar
    assert [b.get_height() for b in ours] == pytest.approx(by_hand)
    assert [b.get_height() for b in theirs] == pytest.approx(list(figures.PAPER["itl_reduction_pct"]))
    assert to_hex(ours[0].get_facecolor()) == FAMILY_COLORS["DLFP law"].lower()
    assert to_hex(theirs[0].get_facecolor()) == PAPER_COLOR.lower()
    assert legend(reduction) == ["ours (measured)", "the paper (Qwen3-0.6B BF16, one A100 80 GB, reported)"]
    p = paired(rows, "itl_p99_ms")
    means = [c for c in reduction.containers if not hasattr(c, "patches")]  # the two error bars
    (mine, x_mine), (paper, x_paper) = [(c.lines[0].get_ydata()[0], c.lines[0].get_xdata()[0]) for c in means]
    assert (mine, paper) == pytest.approx((p["mean_pct"], 27.7)) and x_mine < x_paper
    assert [t.get_text() for t in reduction.get_xticklabels()][-1] == "mean\n(95% CI)"


def test_telemetry(run: RunData) -> None:
    tele = {(k, arm): pd.read_parquet(run.path / f"trial-{k}" / arm / "telemetry.parquet") for k, arm in run.tables}
    fig = figures.telemetry(run, tele)
    renders(fig)
    (ax,) = fig.axes
    assert ax.get_title() == f"Telemetry\n{figures.provenance(run)}"
    assert legend(ax) == ["stock cpu", "dlfp cpu"] and ax.get_ylim() == (0, 105)
    util = tele[(0, "stock")]
    util = util[(util.metric == "util_pct") & (util.source == "cpu")]
    assert ax.lines[0].get_ydata().tolist() == util.value.tolist()


def test_generalization_of_the_modeled_study(sim_table: pd.DataFrame) -> None:
    title = "simulated: real vLLM scheduler on modeled accelerators (cost profiles in the table)"  # 02's
    fig = figures.generalization(sim_table, title)
    renders(fig)
    left, right = fig.axes
    assert fig.get_suptitle() == title
    ticks = [t.get_text() for t in left.get_yticklabels()]
    assert ticks == [f"{r.device}, {r.model} TP{r.TP}\npaper's law" for r in sim_table.itertuples()]
    assert all(re.match(r"(a100|h200) \(modeled\), ", t) for t in ticks)
    assert "reported by the paper (Qwen3-0.6B BF16, one A100 80 GB): CI" in legend(left)
    assert left.lines[0].get_xdata().tolist() == pytest.approx(sim_table["ITL reduction (%)"].tolist())
    assert [b.get_width() for b in right.patches] == pytest.approx(sim_table["signal divergence"].tolist())


def test_generalization_of_the_cpu_ladder_names_the_machine() -> None:
    runs = [load_run(d) for d in run_dirs(RUNS / "generalization-cpu")]
    table = generalization_table(runs)
    fig = figures.generalization(table, "measured")
    renders(fig)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    hardware = runs[0].manifest.hardware
    named = f"{hardware['cpu_logical_cores']}-core {hardware['cpu_model'].replace('(R)', '').split()[0]}"
    assert len(ticks) == 2 and all(t.startswith(named) and "(modeled)" not in t for t in ticks), (named, ticks)
    assert table.source.str.startswith("measured: ").all()


def plain_ticks_apart(fig: plt.Figure) -> None:
    """Every visible axis of the figure labels its ticks as plain numbers (no "1.24x10^3"), none
    overlapping another on the same axis, and says its unit."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in (a for a in fig.axes if a.get_visible()):
        for axis in (ax.xaxis, ax.yaxis):
            assert "(ms" in axis.get_label_text()
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
            assert len(labels) >= 2 and all(re.fullmatch(r"\d+(\.\d+)?", t.get_text()) for t in labels)
            boxes = [t.get_window_extent(renderer) for t in labels]
            assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_frontier_of_the_cpu_baselines() -> None:
    from matplotlib.colors import to_rgba

    from dlfp.analysis.families import FAMILIES, arm_styles
    from dlfp.studies.frontier import ITL, TTFT, run_table
    from dlfp.studies.frontier import frontier as pareto

    base = load_run(RUNS / "study-baselines" / "cpu-tiny", tables=("requests", "tokens"))
    base = dataclasses.replace(base, config=dataclasses.replace(base.config, arms=tuple(
        a for a in base.config.arms if a.name in FRONTIER_ARMS)))  # each arm's rows are its own: a subset is exact
    table = run_table(base)
    assert set(table.kind) == {"fixed budget", "fixed cap", "adaptive"}
    assert set(table.family) == {"stock", "fixed budget", "cap", "DLFP law"}
    title = "P99 ITL against P99 TTFT per arm; cpu-tiny measured"
    fig = figures.frontier({"cpu-tiny": table}, title)
    renders(fig)
    (ax,) = fig.axes
    assert fig.get_suptitle() == title and ax.get_title() == "cpu-tiny"
    assert not ax.texts and ax.get_legend() is None  # no labels printed over each other: one figure legend
    (key,) = fig.legends
    fams = dict(zip(table.arm, table.family, strict=True))
    arms = [a for f in FAMILIES for a in base.arms if fams[a] == f]
    by_family = [f"{a} ({fams[a]})" for a in arms]  # the arms grouped by family, run order within one
    assert [t.get_text() for t in key.get_texts()] == [figures.FRONTIER_LINE, "ITL objective", *by_family]
    styles = arm_styles((a, fams[a]) for a in arms)
    objective = [line for line in ax.lines if line.get_label() == "ITL objective"]
    assert objective[0].get_ydata()[0] == pytest.approx(table["itl objective (ms)"].iloc[0])
    fixed = table[table.kind == "fixed budget"]
    front = pareto(fixed)
    assert 2 <= len(front) < len(fixed)  # mbt-512 and mbt-256: the other budgets are dominated, off the line
    (line,) = [line for line in ax.lines if line.get_label() == figures.FRONTIER_LINE]
    assert line.get_xdata().tolist() == pytest.approx(front[TTFT].tolist())
    assert line.get_ydata().tolist() == pytest.approx(front[ITL].tolist())
    points = {c.get_label(): c for c in ax.collections}  # every arm a point, dominated budgets too
    for _, r in table.iterrows():
        dot = points[f"{r.arm} ({r.family})"]
        assert dot.get_offsets()[0].tolist() == pytest.approx([r[TTFT], r[ITL]]) and len(dot.get_offsets()) == 1
        assert tuple(dot.get_facecolor()[0]) == pytest.approx(to_rgba(styles[r.arm][0]))
    budgets = [styles[a] for a in arms if fams[a] == "fixed budget"]  # one colour family, apart by shade and marker
    assert len({c for c, _ in budgets}) == len({m for _, m in budgets}) == len(budgets) >= 2
    plain_ticks_apart(fig)
    assert source_line(base).startswith("measured: ")  # what the notebook's title says of cpu-tiny


NARROW = [("sarathi", "fixed budget", "fixed budget", 75.6, 1259.8),
          ("mbt-1024", "fixed budget", "fixed budget", 350.2, 1240.7),
          ("stock", "fixed budget", "stock", 681.0, 1294.1), ("lpt-256", "fixed cap", "cap", 177.6, 1376.8),
          ("dlfp", "adaptive", "DLFP law", 156.1, 1290.3), ("dlfp-abs-target", "adaptive", "DLFP law", 58.4, 1279.0)]
"""Arms of ``a100-qwen3-32b`` in the baselines study, (arm, kind, family, P99 ITL, P99 TTFT): every TTFT
within 11%, where matplotlib labels the log axis's minor ticks "1.24x10^3 1.26x10^3", overlapping."""


def test_frontier_labels_a_narrow_log_axis_in_plain_numbers_apart() -> None:
    from dlfp.studies.frontier import ITL, TTFT

    narrow = pd.DataFrame(NARROW, columns=["arm", "kind", "family", ITL, TTFT]).assign(**{"itl objective (ms)": 238.0})
    wide = narrow.assign(**{TTFT: narrow[TTFT] / 40 * np.arange(1, 7), ITL: narrow[ITL] / 10})
    fig = figures.frontier({"a100-qwen3-32b": narrow, "wide": wide, "third": narrow}, "narrow and wide")
    renders(fig)
    plain_ticks_apart(fig)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 2 + len(NARROW)  # one key, each arm once


@pytest.mark.parametrize(("lo", "hi"), [(1240.0, 1377.0), (25.0, 43.0), (160.0, 535.0), (5.0, 700.0), (1.0, 1e12)])
def test_log_ticks_are_round_in_range_and_few(lo: float, hi: float) -> None:
    ticks = figures.log_ticks(lo, hi)
    assert 3 <= len(ticks) <= 8 and ticks == sorted(ticks) and lo <= ticks[0] and ticks[-1] <= hi


def test_regime_boundary_of_the_cpu_sweep() -> None:
    sweep = generalization_table([load_run(RUNS / "study-sensitivity" / name) for name in SWEEP])
    fig = figures.regime_boundary({"cpu-tiny": sweep}, "DLFP's gain against stock's measured stall share")
    renders(fig)
    (ax,) = fig.axes
    assert ax.get_title() == "DLFP's gain against stock's measured stall share"
    assert "measured" not in ax.get_xlabel()  # a sweep may be simulated: the caller's title says which
    assert "cpu-tiny: mean, paired 95% CI" in legend(ax)
    assert "1% of gaps: what a pooled P99 sees" in legend(ax)
    pts = sweep.sort_values("prefill stalls stock (% of gaps)")
    line = next(line for line in ax.lines if len(line.get_xdata()) == len(sweep))
    assert line.get_xdata().tolist() == pytest.approx(pts["prefill stalls stock (% of gaps)"].tolist())
    assert line.get_ydata().tolist() == pytest.approx(pts["ITL reduction (%)"].tolist())
    assert sweep.source.str.startswith("measured: ").all()
