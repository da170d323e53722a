"""The design comparisons (:mod:`dlfp.book.design_section`): a list naming no run folder is said; real runs
are one column (speed) or one row set (split) each, shown as glued."""

from __future__ import annotations

from pathlib import Path

from dlfp.book.design_section import speed, split
from dlfp.book.page import Glue, Say, Show
from dlfp.paths import REPO_ROOT

RUN = str(REPO_ROOT / "data" / "runs" / "cpu-default")


def test_no_run_folder_is_said(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for section in (speed, split):
        [say] = list(section(dirs))
        assert isinstance(say, Say) and say.text == f"none of {dirs} is a run folder"


def test_a_run_is_shown_as_it_is_glued(tmp_path: Path) -> None:
    glue, show = list(speed([RUN, str(tmp_path / "missing")]))
    assert isinstance(glue, Glue) and isinstance(show, Show) and glue.key == "speed_table"
    assert list(glue.value.columns) == list(show.value.columns) and len(glue.value.columns) == 1  # one run
    glue, show = list(split([RUN]))
    assert glue.key == "trials_table" and glue.value is show.value
