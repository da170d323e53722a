"""The results chapter's sensitivity section (:mod:`dlfp.book.sensitivity_section`): without runs each
glued table is a sentence naming the folder and the command; with the committed parameter run alone, its
table and effects are glued and the sweep's stand-in says what is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlfp.analysis.figures import provenance
from dlfp.analysis.runs import load_run
from dlfp.book.page import Figure, Glue, Say, Show, glued
from dlfp.book.sensitivity_section import section
from dlfp.paths import REPO_ROOT


def test_no_runs_glue_sentences_that_say_what_makes_them(tmp_path: Path) -> None:
    root = str(tmp_path / "none")
    items = list(section(root))
    values = glued(items)
    assert str(values["sensitivity_params_table"]) == f"(no params run in {root})"
    note = f"no sensitivity runs under {root} (dlfp study sensitivity --out {root})"
    assert values["sensitivity_regime_table"].data.iloc[0, 0] == note
    assert [i.text for i in items if isinstance(i, Say)] == [note]
    assert not [i for i in items if isinstance(i, (Figure, Show))]


def test_the_parameter_run_alone_shows_its_arms_and_glues_their_effects(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "data" / "runs" / "study-sensitivity" / "params", tmp_path / "study" / "params")
    items = list(section(str(tmp_path / "study")))
    source = provenance(load_run(tmp_path / "study" / "params"))  # "measured ..." or "simulated ..."
    assert isinstance(items[0], Show) and items[0].value.caption == source
    effects = glued(items)["sensitivity_params_table"]
    assert effects.caption == f"DLFP's parameters varied one at a time ({source})"
    assert "stock" not in list(effects.data.columns)  # the varied arms, against stock
    assert [type(i).__name__ for i in items] == ["Show", "Glue", "Glue", "Say"]  # no sweep: a stand-in
    assert isinstance(items[1], Glue)
