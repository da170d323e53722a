"""The stability table (:mod:`dlfp.studies.stability`): a verdict per repetition, how many reproduced, and
*fragile* exactly where the repetitions disagree; on the committed paired run repeated, the verdicts the
results chapter gives it, all stable (a run agrees with itself, whatever it gives)."""

from __future__ import annotations

import pandas as pd
import pytest

from dlfp.analysis.runs import RunData, load_run
from dlfp.paths import REPO_ROOT
from dlfp.studies import stability
from dlfp.studies.claims import load_claims, paired_verdicts


def grid(cells: dict[str, list[str]]) -> pd.DataFrame:
    return pd.DataFrame(cells, index=pd.Index(["itl_reduction", "output_agreement", "ttft_inside_slo"],
                                              name="claim row (CPU engine, measured)"))


def test_agreement_is_counted_and_a_disagreement_is_fragile(monkeypatch: pytest.MonkeyPatch) -> None:
    verdicts = grid({f"rep-{i}": ["reproduced", "reproduced", v] for i, v in
                     enumerate(["reproduced", "not reproduced", "reproduced", "reproduced", "not testable here"], 1)})
    monkeypatch.setattr(stability, "paired_verdicts", lambda claims, runs, regime_bound: verdicts[list(runs)])
    runs = dict.fromkeys(verdicts.columns)
    table = stability.stability_table(runs, claims=[])
    assert table["reproduced in"].tolist() == ["5 of 5", "5 of 5", "3 of 5"]
    assert table.stability.tolist() == ["stable", "stable", "fragile"]
    assert stability.fragile_rows(table) == ["ttft_inside_slo"]
    assert stability.summary(table) == (
        "Fragile across 5 repetitions of the default paired design, so the verdict shown for each could come out "
        "otherwise on a rerun: P99 TTFT inside SLO (reproduced in 3 of 5 repetitions).")
    steady = stability.stability_table({k: None for k in ["rep-1", "rep-3", "rep-4"]}, claims=[])
    assert stability.fragile_rows(steady) == [] and "the same in all 3 repetitions" in stability.summary(steady)
    none = stability.stability_table({}, claims=[])
    assert none.empty and stability.fragile_rows(none) == [] and "rests on one run" in stability.summary(none)


def test_a_run_repeated_is_stable_with_the_chapters_verdicts() -> None:
    run = load_run(REPO_ROOT / "data" / "runs" / "cpu-default")
    runs: dict[str, RunData] = {"rep-1": run, "rep-2": run}
    table = stability.stability_table(runs, book=run)
    assert table[["rep-1", "rep-2"]].equals(paired_verdicts(load_claims(), runs, regime_bound=True))
    assert list(table.columns) == [stability.BOOK, "rep-1", "rep-2", "reproduced in", "stability"]
    assert (table[stability.BOOK] == table["rep-1"]).all() and (table.stability == "stable").all()
    assert stability.summary(table).endswith("and as the book's run gives it (stable).")


def test_a_book_verdict_no_repetition_gives_is_fragile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The book shows one run; where every rerun disagrees with it, that verdict is fragile too."""
    reps = grid({f"rep-{i}": ["not testable here", "reproduced", "reproduced"] for i in range(1, 6)})
    book = grid({stability.BOOK: ["reproduced", "reproduced", "reproduced"]})
    monkeypatch.setattr(stability, "paired_verdicts",
                        lambda claims, runs, regime_bound: book if stability.BOOK in runs else reps[list(runs)])
    table = stability.stability_table(dict.fromkeys(reps.columns), claims=[], book=object())  # type: ignore[arg-type]
    assert stability.fragile_rows(table) == ["itl_reduction"] and table.at["itl_reduction", "reproduced in"] == "0 of 5"
    said = stability.summary(table)
    assert "P99 ITL reduction (reproduced in 0 of 5 repetitions; the book's run: reproduced)" in said


def test_only_complete_repetitions_are_read_in_number_order(tmp_path) -> None:
    import shutil

    for name in ("rep-10", "rep-2"):
        shutil.copytree(REPO_ROOT / "data" / "runs" / "cpu-default", tmp_path / name)
    (tmp_path / "rep-3").mkdir()  # started, no manifest yet
    assert list(stability.repetitions(tmp_path)) == ["rep-2", "rep-10"]
