"""``dlfp.studies.claims_summary``: the first page's claims table, one row per claim and one column per
source, each cell a verdict mark and a short value, from :func:`dlfp.studies.claims.evaluate` rows."""

from __future__ import annotations

import pandas as pd

from dlfp.studies.claims import COLUMNS, EVIDENCE, load_claims
from dlfp.studies.claims_summary import PAPER_COLUMN, cell, labels_of, legend, readable, short_value, summary

CPU, GPU, SIM, _ = EVIDENCE


def _rows(*rows: tuple[str, str, str, str]) -> pd.DataFrame:
    """evaluate()-shaped rows from (claim, evidence, ours, verdict)."""
    return pd.DataFrame([{c: "" for c in COLUMNS} | {"claim": claim, "paper": f"paper says {claim}", "evidence": ev,
                          "ours": ours, "verdict": verdict} for claim, ev, ours, verdict in rows], columns=COLUMNS)


ROWS = _rows(
    ("reduces", GPU, "", "not testable here"),
    ("reduces", CPU, "59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)", "reproduced"),
    ("reduces", SIM, "88.0% (paired 95% CI 81.9 to 94.2%, 3 trials)", "reproduced"),
    ("general", SIM, "93.5% (paired 95% CI 92.6 to 94.4%, 3 trials)", "not reproduced"),
    ("general", SIM, "-3.0% (paired 95% CI -9 to 2%, 3 trials)", "reproduced"),
    ("cause", SIM, "79.1% (paired 95% CI 69.2 to 89.1%, 2 trials) (arm dlfp-completion)",
     "not testable here (the paper's failure does not occur here: arm dlfp 93.5%)"),
)


def test_a_short_value_is_the_head_of_ours() -> None:
    assert short_value("59.2% (paired 95% CI 44.6 to 73.8%, 3 trials)") == "59.2%"
    assert short_value("300 of 300 requests identical") == "300 of 300 requests identical"
    assert short_value("P99 TTFT +113.3% (mean change); worst DLFP P99 TTFT 665 ms of 900") == "P99 TTFT +113.3%"


def test_one_row_per_claim_one_column_per_source_in_order() -> None:
    table = summary(ROWS, {"reduces": "P99 ITL reduction"})
    assert list(table.index) == ["P99 ITL reduction", "general", "cause"]  # claims-file order; no label: the sentence
    assert list(table.columns) == [PAPER_COLUMN, CPU, SIM, GPU]  # CPU, simulated, then GPU
    assert table.loc["P99 ITL reduction", PAPER_COLUMN] == "paper says reduces"
    assert table.loc["P99 ITL reduction", CPU] == "✓ 59.2%"
    assert table.loc["P99 ITL reduction", GPU] == "– not testable"
    assert table.loc["general", SIM] == "✗ 93.5% · ✓ -3.0%"  # two rows of one source share a cell
    assert table.loc["general", CPU] == ""  # a claim with no row of a source: an empty cell, not a verdict
    assert table.loc["cause", SIM] == "– 79.1%"  # not testable, with the value it would have been judged on


def test_a_source_with_no_row_has_no_column() -> None:
    table = summary(ROWS[ROWS.evidence != GPU])
    assert GPU not in table.columns


def test_a_cell_marks_each_verdict_kind() -> None:
    assert cell(_rows(("c", CPU, "1 failed", "not reproduced"))) == "✗ 1 failed"
    assert legend() == ("✓ reproduced, ✗ not reproduced, – not testable here; * the run's scaled design makes this "
                        "outcome likely")


def test_a_row_the_design_implies_is_starred() -> None:
    rows = _rows(("c", CPU, "59.2% (paired 95% CI 44.6 to 73.8%)", "reproduced"), ("c", CPU, "2 ms", "reproduced"))
    rows.loc[0, "design"] = "implied by the scaled design (stall_share=0.03)"
    assert cell(rows) == "✓* 59.2% · ✓ 2 ms"


def test_every_declared_claim_gets_a_label_in_words() -> None:
    claims = load_claims()
    labels = labels_of(claims)
    assert set(labels) == {c["claim"] for c in claims} and len(set(labels.values())) == len(claims)
    assert labels[claims[0]["claim"]] == "P99 ITL reduction"
    assert all(len(label) < 30 and label[0].isupper() for label in labels.values())


def test_the_readable_table_names_each_claim_once_and_numbers_its_sources() -> None:
    rows = ROWS.assign(source=["no gpu run rendered", "measured: 2-core AMD EPYC", "simulated: cost profile a100",
                               "simulated: cost profile a100", "simulated: cost profile a100",
                               "simulated: cost profile a100"])
    table, notes = readable(rows)
    assert list(table.claim) == ["reduces", "", "", "general", "", "cause"]
    assert list(table.paper) == ["paper says reduces", "", "", "paper says general", "", "paper says cause"]
    assert list(table.source) == ["[1]", "[2]", "[3]", "[3]", "[3]", "[3]"]
    assert notes == ["[1] no gpu run rendered", "[2] measured: 2-core AMD EPYC", "[3] simulated: cost profile a100"]
    assert list(table.verdict) == list(rows.verdict) and list(table.columns) == list(rows.columns)
