"""The verdicts on the paper's claims in the results chapter (:mod:`dlfp.book.claims_section`): on the
committed CPU run, every table the pages paste is glued and the sources are named; without sweep or
stability runs the page says what is missing instead of showing an empty table."""

from __future__ import annotations

import shutil
from pathlib import Path

from IPython.display import Markdown

from dlfp.analysis.runs import load_run
from dlfp.book.claims_section import claims, claims_over_stall_share, stability
from dlfp.book.page import Glue, Say, Show, glued
from dlfp.paths import REPO_ROOT

RUNS = REPO_ROOT / "data" / "runs"


def test_the_claims_are_glued_and_their_sources_named() -> None:
    run = load_run(RUNS / "cpu-default")
    items = list(claims(run, "", str(RUNS / "generalization-sim"), str(RUNS / "study-baselines")))
    assert [i.key for i in items if isinstance(i, Glue)] == ["claims_table", "claims_summary", "claims_counts",
                                                            "claims_counts_text"]
    values = glued(items)
    assert values["claims_summary"].caption.startswith("The paper's claims, per source of evidence: ")
    shown = [i.value for i in items if isinstance(i, Show)]
    assert shown[0] is values["claims_counts"]
    assert isinstance(shown[-1], Markdown) and shown[-1].data.startswith("Sources: ")


def test_without_the_cpu_sweep_the_verdicts_are_said_to_stand_at_one_stall_share(tmp_path: Path) -> None:
    items = list(claims_over_stall_share(str(tmp_path)))
    assert isinstance(items[0], Show) and len(items) == 2 and isinstance(items[1], Say)
    assert items[1].text.startswith(f"no stalls-cpu-tiny-* runs under {tmp_path}")
    assert not glued(items)


def test_one_sweep_run_gives_its_designed_and_measured_stall_share(tmp_path: Path) -> None:
    name = "stalls-cpu-tiny-0.01"
    shutil.copytree(RUNS / "study-sensitivity" / name, tmp_path / name)
    items = list(claims_over_stall_share(str(tmp_path)))
    held = glued(items)["claims_sensitivity"]
    assert any(str(c).startswith("designed 1%, measured ") for c in held.columns)
    assert "stall share = stock's gaps above T*" in items[-1].value.caption


def test_without_repetitions_the_stability_table_says_so(tmp_path: Path) -> None:
    run = load_run(RUNS / "cpu-default")
    items = list(stability(str(tmp_path), run))
    values = glued(items)
    assert values["stability_table"].data.iloc[0, 0] == f"no complete repetition under {tmp_path}"
    assert [i.text for i in items if isinstance(i, Say)] == [str(values["stability_summary"])]
