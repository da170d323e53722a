"""The simulation chapter's virtual-time tables (:mod:`dlfp.book.virtual_section`): a report not made yet
is a sentence glued and shown under the table's name; a committed report becomes a table whose caption
says it is simulated and which command made it."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlfp.book.page import Glue, Show, glued
from dlfp.book.virtual_section import section
from dlfp.paths import REPO_ROOT

TABLES = ["virtual_modes_table", "virtual_measured_table", "virtual_light_table", "virtual_capacity_table",
          "virtual_speed_table", "virtual_explanations_table"]


def test_reports_not_made_are_sentences_under_each_tables_name(tmp_path: Path) -> None:
    root = str(tmp_path / "none")
    items = list(section(root))
    assert [i.key for i in items if isinstance(i, Glue)] == ["virtual_headline", *TABLES]
    values = glued(items)
    for key in TABLES:
        assert str(values[key]) == f"Not made yet: no report under {root} ({key})."
    assert [i.value for i in items if isinstance(i, Show)] == [values[k] for k in TABLES]  # shown as glued


def test_a_made_report_is_a_simulated_table_naming_its_command(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "data" / "runs" / "virtual-time" / "speed", tmp_path / "v" / "speed")
    values = glued(section(str(tmp_path / "v")))
    speed = values["virtual_speed_table"]
    assert " Simulated. Made by " in speed.caption and len(speed.data)
    assert str(values["virtual_modes_table"]).startswith("Not made yet")  # the others stay sentences
