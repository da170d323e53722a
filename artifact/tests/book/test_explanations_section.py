"""The explanations table (:mod:`dlfp.book.explanations_section`) from the committed study: the table is
glued as shown, with the verdict sentence read from the same table."""

from __future__ import annotations

from dlfp.book.explanations_section import glues, table
from dlfp.book.page import glued
from dlfp.paths import REPO_ROOT
from dlfp.studies import explanations

RUNS = REPO_ROOT / "data" / "runs"


def test_the_table_and_its_verdict_are_glued() -> None:
    styled = table(str(RUNS / "study-baselines"), str(RUNS / "study-explanations"))
    assert styled.caption.startswith("P99 ITL reduction against stock, % (mean [paired 95% CI])")
    values = glued(glues(styled))
    assert values["explanations_table"] is styled
    assert str(values["explanations_verdict"]) == explanations.verdict(styled.data)
