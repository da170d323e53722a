"""The modeled generalization section (:mod:`dlfp.book.generalization_section`): without runs every setting
the prose cites is a note naming its missing run; with one committed modeled run that setting gets its
reduction in the words its interval allows, the decode step the prose cites, and the figure."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd

from dlfp.book.generalization_section import SMALL, load, section, setting_text, shown
from dlfp.book.page import Figure, glued
from dlfp.paths import REPO_ROOT
from dlfp.studies.generalization import STUDY_RUNS, StudyRun, glue_key

LABELS = [StudyRun(**entry).label for entry in STUDY_RUNS]


def test_no_runs_name_each_missing_setting(tmp_path: Path) -> None:
    root = str(tmp_path / "none")
    runs, table = load(root)
    items = list(section(root, runs, table))
    values = glued(items)
    for label in LABELS:
        assert str(values[glue_key(label)]) == f"(run {label} is not in {root})"
    assert str(values["sim_small_decode"]) == f"(run {SMALL} is not in {root})"
    assert str(values["sim_settings_table"]) == f"(no modeled runs in {root})"
    assert "sim_pattern" in values and not [i for i in items if isinstance(i, Figure)]
    assert isinstance(shown(table), pd.DataFrame) and shown(table).empty


def test_one_modeled_run_gets_its_numbers_and_the_figure(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "data" / "runs" / "generalization-sim" / SMALL, tmp_path / "sim" / SMALL)
    root = str(tmp_path / "sim")
    runs, table = load(root)
    items = list(section(root, runs, table))
    values = glued(items)
    assert str(values[glue_key(SMALL)]) == setting_text(table.iloc[0])
    assert re.fullmatch(r"-?\d+\.\d% \(.+; signal divergence \d+\.\d\d(; .+)?\)", str(values[glue_key(SMALL)]))
    assert re.fullmatch(r"\d+\.\d\d ms \(the run's pre-flight, \d+ decoding\), \d+\.\d\d ms of it host time "
                        r"\(.+ in the profile\)", str(values["sim_small_decode"]))
    others = [label for label in LABELS if label != SMALL]
    assert all(str(values[glue_key(label)]).startswith("(run ") for label in others)
    assert isinstance(items[-1], Figure)
    assert list(shown(table).data.columns) == [c for c in table.columns if c != "run"]
