"""The results chapter's modeled generalization study: per setting DLFP's P99 ITL reduction with the words
its interval allows, glued for the simulation chapter's prose, whether the paper's pattern reproduces, the
modeled decode step the prose cites, and the figure, from the modeled runs, as :mod:`dlfp.book.page` items.
A setting without its run gets a note naming it, not a number."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.analysis import figures
from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.analysis.stats import paired, reduction_notes
from dlfp.analysis.tables import generalization_table
from dlfp.book.notebook import Plain
from dlfp.book.page import Figure, Glue, Item
from dlfp.studies.explanations import FAILS, WORKS, reproduces
from dlfp.studies.frontier import reduction_cell
from dlfp.studies.generalization import GENERALIZATION_CAPTION, STUDY_RUNS, StudyRun, glue_key

SMALL = "a100-qwen3-0.6b-tp1"
"""The run whose modeled decode step the simulation chapter cites."""


def load(root: str) -> tuple[dict[str, RunData], pd.DataFrame]:
    """The modeled runs by folder name, and their generalization table (empty without runs)."""
    dirs = sorted(p for p in Path(root).glob("*") if (p / "manifest.json").is_file())
    runs = {d.name: load_run(d) for d in dirs}
    return runs, generalization_table(list(runs.values())) if runs else pd.DataFrame()


def setting_text(row: Mapping[str, Any]) -> str:
    """A setting's reduction as the prose gives it: mean, then the words, interval, signal divergence and regime."""
    notes = reduction_notes(row["ITL reduction (%)"], row["trials"], row["ITL CI lo (%)"], row["ITL CI hi (%)"])
    notes += [f"signal divergence {row['signal divergence']:.2f}"] + (
        [] if row["regime"] == "in regime" else [row["regime"]])
    return f"{row['ITL reduction (%)']:.1f}% ({'; '.join(notes)})"


def section(root: str, runs: Mapping[str, RunData], table: pd.DataFrame) -> Iterator[Item]:
    """Everything the section glues and shows, in the page's order (:func:`load`'s runs and table)."""
    found = {r["run"]: r for _, r in table.iterrows()}
    for label in [StudyRun(**entry).label for entry in STUDY_RUNS]:  # numbers for the simulation chapter's prose
        r = found.get(label)
        yield Glue(glue_key(label), Plain(f"(run {label} is not in {root})" if r is None else setting_text(r)))
    folders = {t: t if t.endswith("-tp2") else f"{t}-tp1" for t in (WORKS, *FAILS)}  # study target -> run label
    cells = {t: paired(trial_rows(runs[f]), "itl_p99_ms") for t, f in folders.items() if f in runs}
    yield Glue("sim_pattern", Plain(reproduces(cells)))  # against the paper's pattern, for the prose
    yield Glue("sim_small_decode", Plain(_small_decode(runs[SMALL]) if SMALL in runs
                                         else f"(run {SMALL} is not in {root})"))
    if not len(table):
        yield Glue("sim_settings_table", Plain(f"(no modeled runs in {root})"))
        return
    settings = pd.DataFrame({
        "P99 ITL reduction vs stock (paired 95% CI)": [reduction_cell(r["ITL reduction (%)"], r["ITL CI lo (%)"],
                                                                      r["ITL CI hi (%)"]) for _, r in table.iterrows()],
        "trials": table.trials.to_numpy(), "signal divergence": table["signal divergence"].map("{:.2f}".format)
        .to_numpy(), "design regime": table.regime.to_numpy()}, index=pd.Index(table.run, name="setting"))
    yield Glue("sim_settings_table", settings.style.set_caption(
        f"The modeled study's settings (simulated; {root}): DLFP (the paper's law) against stock"))
    yield Figure(figures.generalization(table, "simulated: real vLLM 0.32 scheduler on modeled accelerators; "
                                               "device = cost profile"), GENERALIZATION_CAPTION)


def _small_decode(run: RunData) -> str:
    host = (run.manifest.sim_profile or {})["values"]["host"]
    measured = (run.manifest.design or {})["measured"]
    host_ms = (host["step_fixed_us"]["value"] + measured["decoders"] * host["per_request_us"]["value"]) / 1e3
    return (f"{1e3 * measured['decode_s']:.2f} ms (the run's pre-flight, {measured['decoders']} decoding), "
            f"{host_ms:.2f} ms of it host time ({host['step_fixed_us']['source']} in the profile)")


def shown(table: pd.DataFrame) -> Any:
    """The settings' table as the page shows it, under the figure."""
    return table.drop(columns=["run"]).style.format(precision=2).hide(axis="index") if len(table) else table
