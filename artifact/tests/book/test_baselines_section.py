"""The results chapter's baselines section (:mod:`dlfp.book.baselines_section`) from real study folders:
none, and one holding a single committed target. Checked: each target and arm the prose can name gets a
number or a note saying which run is missing, every value *Beyond the paper* pastes is glued either way,
and each run's own table is captioned with where it comes from; not the committed numbers."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from dlfp.book.baselines_section import TARGETS, load, per_run, section
from dlfp.book.page import Figure, Glue, Say, Show, glued
from dlfp.paths import REPO_ROOT
from dlfp.studies.generalization import glue_key
from dlfp.studies.plans import BASELINE_ARMS

PASTED = {k for page in ("beyond.md", "simulation.md", "method.md", "intro.md")
          for k in re.findall(r"(?:\{glue:\} *|::)(baselines_\w+)", (REPO_ROOT / "book" / page).read_text())}
PLANNED = [a["name"] for a in BASELINE_ARMS if a["name"] != "stock"]


def test_no_study_yet_names_every_missing_run_and_still_glues_what_pages_paste(tmp_path: Path) -> None:
    root = str(tmp_path / "none")
    items = list(section(root, *load(root)))
    values = glued(items)
    assert PASTED and set(values) >= PASTED
    for target in TARGETS:
        for arm in PLANNED:
            assert str(values[glue_key(f"{target}-{arm}")]) == f"(run {target} is not in {root})"
    assert not [i for i in items if isinstance(i, (Figure, Show))]
    [say] = [i for i in items if isinstance(i, Say)]
    assert say.text == f"no baselines runs under {root} (dlfp study baselines --out {root} makes them)"
    assert list(per_run(*load(root))) == []


def test_a_target_with_its_run_gets_numbers_the_others_a_note(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "data" / "runs" / "study-baselines" / "cpu-tiny", tmp_path / "study" / "cpu-tiny")
    root = str(tmp_path / "study")
    runs, tables = load(root)
    items = list(section(root, runs, tables))
    values = glued(items)
    assert set(values) >= PASTED
    ran = [k for k in values if k.startswith(glue_key("cpu-tiny-"))]
    assert ran and all(re.fullmatch(r"-?\d+\.\d% \(.+\)", str(values[k])) for k in ran)  # mean (words; interval)
    assert str(values[glue_key(f"{TARGETS[1]}-dlfp")]) == f"(run {TARGETS[1]} is not in {root})"
    assert [type(i).__name__ for i in items if not isinstance(i, Glue)] == ["Figure", "Show"]  # frontier, summary
    [table] = list(per_run(runs, tables))
    assert table.value.caption.startswith("cpu-tiny: measured")  # where its numbers come from, first
