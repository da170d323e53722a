"""Does a measured verdict survive a regeneration? The default paired design repeated, verdict by verdict.

A committed run is one draw: its pre-flight measured the machine once, its trials ran once, and a
regeneration at the same commit on the same machine has turned "TTFT rises but stays inside the SLO"
into *not reproduced*. The stability study (``dlfp study stability``, :func:`dlfp.studies.plans.stability`)
repeats the default paired design :data:`~dlfp.studies.plans.STABILITY_TIMES` or more times, each with
its own pre-flight and fresh engines; here every ``paired`` row of ``configs/claims.yaml`` is judged on
each repetition exactly as the results chapter judges the committed run (outside its regime, a
regime-bound row is *not testable here*), and the table says how many repetitions agree. A row whose
verdict differs between repetitions is **fragile**: the book's first page and the README name it, since
the one verdict the book shows for it could have come out the other way on a rerun.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.analysis.runs import RunData, load_run
from dlfp.studies.claims import load_claims, paired_verdicts
from dlfp.studies.claims_summary import id_words

STABLE, FRAGILE = "stable", "fragile"


def repetitions(root: str | Path) -> dict[str, RunData]:
    """The complete repetitions under ``root`` (``rep-1`` ... in number order), loaded and verified; an
    unfinished one is left out (a rerun of the study resumes it)."""
    from dlfp.trials.runfolder import MANIFEST
    from dlfp.trials.schema import read_manifest

    folders = sorted((p for p in Path(root).glob("rep-*") if (p / MANIFEST).is_file()),
                     key=lambda p: int(p.name.removeprefix("rep-")) if p.name[4:].isdigit() else 1 << 30)
    return {p.name: load_run(p) for p in folders if read_manifest(p).complete}


BOOK = "book's run"
"""The column of the run the results chapter renders, where it is a run of the same design."""


def stability_table(runs: Mapping[str, RunData], claims: list[dict[str, Any]] | None = None,
                    book: RunData | None = None) -> pd.DataFrame:
    """Per ``paired`` claim row: the verdict of ``book`` (the run the book shows, where given) and of each
    repetition (columns in ``runs``' order), how many repetitions reproduced it, and whether every verdict,
    the book's included, is the same (``stable``) or not (``fragile``: the book's verdict is one a rerun
    need not give). Empty without repetitions."""
    if not runs:
        return pd.DataFrame()
    claims = load_claims() if claims is None else claims
    table = paired_verdicts(claims, runs, regime_bound=True)
    reps = list(runs)
    verdicts = table[reps]
    if book is not None:
        table.insert(0, BOOK, paired_verdicts(claims, {BOOK: book}, regime_bound=True)[BOOK])
        verdicts = table[[BOOK, *reps]]
    table["reproduced in"] = [f"{int((row == 'reproduced').sum())} of {len(reps)}" for _, row in table[reps].iterrows()]
    table["stability"] = [STABLE if row.nunique() == 1 else FRAGILE for _, row in verdicts.iterrows()]
    return table


def fragile_rows(table: pd.DataFrame) -> list[str]:
    """The claim rows whose verdict flipped between repetitions, in table order."""
    return [] if table.empty else list(table.index[table.stability == FRAGILE])


def _words(row: str) -> str:
    """A row's name in words: ``ttft_inside_slo`` -> ``P99 TTFT inside SLO`` (``id: value`` keeps its value)."""
    claim_id, _, value = row.partition(": ")
    return id_words(claim_id) + (f" ({value})" if value else "")


def summary(table: pd.DataFrame) -> str:
    """One sentence for the first page: how many repetitions, and which claim rows are fragile (with their
    counts) or that none is."""
    if table.empty:
        return "No stability study is rendered: each measured verdict rests on one run."
    reps = len([c for c in table.columns if c not in ("reproduced in", "stability", BOOK)])
    fragile = fragile_rows(table)
    book = BOOK in table.columns
    if not fragile:
        return (f"Every measured verdict came out the same in all {reps} repetitions of the default paired design"
                + (", and as the book's run gives it" if book else "") + " (stable).")

    def said(row: str) -> str:
        shown = f"; the book's run: {table.at[row, BOOK]}" if book else ""
        return f"{_words(row)} (reproduced in {table.at[row, 'reproduced in']} repetitions{shown})"

    return (f"Fragile across {reps} repetitions of the default paired design, so the verdict shown for each could "
            f"come out otherwise on a rerun: {'; '.join(said(row) for row in fragile)}.")
