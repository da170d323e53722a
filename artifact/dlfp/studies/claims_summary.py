"""The paper's claims at a glance: one row per claim, one column per source of evidence.

:func:`dlfp.studies.claims.evaluate` gives one row per (claim, source) with the declared expectation,
the falsifier and the verdict's reason: the results chapter's full table. The first page needs the
answer before the reasons: what the paper reports, and per kind of evidence each value with a
verdict mark. Several rows of one claim and source (the three modeled settings of "no
generalization") share a cell, in claims-file order. A column of a source no rendered run feeds
(every GPU row, until a GPU run is rendered) says so in one cell per claim rather than vanishing, so
the reader sees what was not tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dlfp.studies.claims import EVIDENCE, VERDICTS, verdict_kinds

MARKS = dict(zip(VERDICTS, ("✓", "✗", "–"), strict=True))
"""The mark of each verdict kind: reproduced, not reproduced, not testable here."""
PAPER_COLUMN = "reported by the paper"
COLUMNS = (PAPER_COLUMN, EVIDENCE[0], EVIDENCE[2], EVIDENCE[1], EVIDENCE[3])
"""The summary's columns: the paper's value, then our evidence, CPU measurements first (what this
machine measured), simulations, GPU measurements (rendered only where a GPU run is), and a run whose GPU
claim nothing verifies, apart from them."""


def short_value(ours: str) -> str:
    """The head of an ``ours`` cell, its reasons cut (they are in the full table): "59.2% (paired 95%
    CI ...)" -> "59.2%"; "300 of 300 requests identical" stays."""
    return ours.split(" (", 1)[0].split("; ", 1)[0].strip()


IMPLIED = "*"
"""Added to a row's mark where the run's scaled design makes the claim's outcome likely (the full
table's ``design`` column says which rules): such a ✓ says less than one the design left open."""


def cell(rows: pd.DataFrame) -> str:
    """One source's cell of a claim: each row as its mark and short value ("✓ 59.2%"; "✓* 59.2%" where
    the design implies the outcome, :data:`IMPLIED`), a row with no value as its mark and "not
    testable"; rows joined by " · "."""
    parts = []
    implied = rows["design"].astype(bool) if "design" in rows else pd.Series(False, index=rows.index)
    for ours, kind, by_design in zip(rows.ours, verdict_kinds(rows), implied, strict=True):
        value = short_value(ours) if ours else "not testable"
        parts.append(f"{MARKS[kind]}{IMPLIED if by_design else ''} {value}")
    return " · ".join(parts)


def summary(claims: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per claim (in order; its label from ``labels`` by claim sentence, else the sentence):
    the paper's value and one :func:`cell` per source of evidence that has rows (:data:`COLUMNS`)."""
    labels = labels or {}
    out: dict[str, dict[str, str]] = {}
    for claim, rows in claims.groupby("claim", sort=False):
        entry = {PAPER_COLUMN: str(rows.paper.iloc[0])}
        for source in COLUMNS[1:]:
            mine = rows[rows.evidence == source]
            if len(mine):
                entry[source] = cell(mine)
        out[labels.get(str(claim), str(claim))] = entry
    present = [c for c in COLUMNS if any(c in e for e in out.values())]
    table = pd.DataFrame.from_dict(out, orient="index").reindex(columns=present).fillna("")
    return table.rename_axis("claim")


WORDS = {"itl": "P99 ITL", "ttft": "P99 TTFT", "slo": "SLO"}
"""How a claim id's abbreviations read in its label."""


def labels_of(claims: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Claim sentence -> a short label, its id in words ("ttft_inside_slo" -> "P99 TTFT inside SLO"):
    the full sentence is one click away, in the results chapter's table."""
    return {c["claim"]: id_words(str(c["id"])) for c in claims}


def id_words(claim_id: str) -> str:
    """A claim's id in words: ``ttft_inside_slo`` -> ``P99 TTFT inside SLO``."""
    text = " ".join(WORDS.get(w, w) for w in claim_id.split("_"))
    return text[0].upper() + text[1:]


def legend() -> str:
    """The marks in words, for the summary's caption."""
    return (", ".join(f"{mark} {kind}" for kind, mark in MARKS.items())
            + f"; {IMPLIED} the run's scaled design makes this outcome likely")


def readable(claims: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The full table of :func:`~dlfp.studies.claims.evaluate`, for reading rather than checking: a
    claim's sentence and the paper's value on its first row only (its rows are contiguous), and each
    source description, often longer than the rest of its row, as a numbered note ("[1]") listed
    under the table (the second item returned)."""
    sources = list(dict.fromkeys(claims.source))
    table = claims.copy()
    table["source"] = [f"[{sources.index(s) + 1}]" for s in table.source]
    first = ~table.claim.duplicated()
    table["claim"] = table.claim.where(first, "")
    table["paper"] = table.paper.where(first, "")
    return table, [f"[{i + 1}] {s}" for i, s in enumerate(sources)]
