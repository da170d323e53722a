"""The simulation chapter's virtual-time tables: how far virtual time departs from real time per unit, what
remains with the host costs fitted, how much faster it runs, and whether the explanations study reads the
same, from the reports ``dlfp bench virtual`` writes, as :mod:`dlfp.book.page` items. A report not made
yet is a sentence saying so, glued under the same name."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dlfp.analysis import virtual_time as vt
from dlfp.book.notebook import Plain
from dlfp.book.page import Glue, Item, Show

PCT = "{:+.1%}"
DIFFERENCES = {c: PCT for c in ("P99 ITL, median |difference|", "P99 ITL, median difference",
                                "P99 TTFT, median |difference|", "P99 TTFT, median difference")}
REPORTS = ("modes", "modes-measured", "speed", "explanations")
"""The report folders under the root, as ``dlfp bench virtual`` names them."""


def _table(key: str, root: str, report: Any, build: Callable[[Any], Any], caption: str,
           formats: Mapping[str, str]) -> Iterator[Item]:
    if report is None:
        shown: Any = Plain(f"Not made yet: no report under {root} ({key}).")
    else:
        shown = build(report).style.format(formats, na_rep="").hide(axis="index").set_caption(
            f"{caption} Simulated. Made by {vt.made_by(report)}.")
    yield Glue(key, shown)
    yield Show(shown)


def section(root: str) -> Iterator[Item]:
    """Everything the section shows and glues, in the page's order (``root``: the reports' folder)."""
    modes, measured, speed, expl = (vt.load(Path(root) / k / "report.json") for k in REPORTS)
    yield Glue("virtual_headline", Plain(vt.headline(modes, speed)))
    yield from _table(
        "virtual_modes_table", root, modes, vt.modes_summary,
        "Per modeled target, over the same units (every load, every trial, the four arms): the relative difference "
        "virtual / real - 1 of each unit's P99 ITL and P99 TTFT, its median absolute value and its median.",
        DIFFERENCES)
    yield from _table(
        "virtual_measured_table", root, measured, vt.modes_summary,
        "The same units replayed with each target's engine-core costs fitted to its own real-time run (the simulating "
        "host's schedule(), update and output paths, as that run's records show them; dlfp.sim.enginefit) instead of "
        "gpu-node's: what remains is what the loop model itself gets wrong.", DIFFERENCES)
    yield from _table(
        "virtual_light_table", root, measured, vt.lightest_load,
        "Stock at the sweep's lowest load, with the measured host costs: P50 and P99 ITL in both clocks (medians over "
        "trials). Where the medians agree and the P99s do not, the real-time tail is the simulating host's scheduling "
        "noise (its engine core, modeled stream and client share two cores), which virtual time does not model.",
        {c: "{:.2f}" for c in ("P50 ITL, real (ms)", "P50 ITL, virtual (ms)", "P99 ITL, real (ms)",
                               "P99 ITL, virtual (ms)")})
    yield from _table(
        "virtual_capacity_table", root, modes, vt.modes_capacity,
        "Capacity (requests/s within both SLOs, mean over trials) per target, SLO level and arm, in both clocks.",
        {"real time (req/s)": "{:.3g}", "virtual time (req/s)": "{:.3g}", "difference": PCT})
    yield from _table(
        "virtual_speed_table", root, speed, vt.speed,
        "One unit per modeled target (stock at load 0.6, trial 0, the committed run's design), run in both clocks on "
        "one machine: the real-time unit with its engine's start and warm-up, and its replay alone.",
        {"span (s)": "{:.1f}", "real time, whole unit (s)": "{:.1f}", "real time, replay (s)": "{:.1f}",
         "virtual time (s)": "{:.2f}", "speed-up, whole unit": "{:.1f}x", "speed-up, replay": "{:.1f}x"})
    yield from _table(
        "virtual_explanations_table", root, expl, vt.explanations,
        "Which candidate explanation of the paper's negative result reproduces its pattern, from the committed "
        "real-time runs and from the same runs in virtual time.", {})
