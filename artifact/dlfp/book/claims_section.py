"""The results chapter's verdicts on the paper's claims: per claim and source of evidence, whether the
range it states held, why a design implies some verdicts, how the measured verdicts move over the
stall-share sweep, and whether repetitions of the default design agree, as :mod:`dlfp.book.page` items."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from IPython.display import Markdown

from dlfp.analysis import figures
from dlfp.analysis.runs import RunData, load_run
from dlfp.analysis.tables import regime
from dlfp.book.notebook import Plain
from dlfp.book.page import Glue, Item, Say, Show
from dlfp.studies.claims import (
    EVIDENCE,
    claim_runs,
    counts_sentence,
    design_reasons,
    evaluate,
    evidence,
    load_claims,
    sensitivity,
    verdict_counts,
)
from dlfp.studies.claims_summary import labels_of, legend, readable, summary
from dlfp.studies.stability import repetitions, stability_table
from dlfp.studies.stability import summary as stability_words
from dlfp.trials.provenance import run_folders


def claims(run: RunData, gpu_run_dir: str, modeled_root: str, baselines_root: str) -> Iterator[Item]:
    """Every claim's verdict per source of evidence: the full table, its summary and the counts."""
    table = evaluate(claim_runs(run, gpu_run_dir, modeled_root, baselines_root))
    yield Glue("claims_table", table.style.hide(axis="index"))
    yield Glue("claims_summary", summary(table, labels_of(load_claims())).style.set_caption(
        f"The paper's claims, per source of evidence: {legend()}. Each value and its reason are in the results "
        "chapter's full table."))
    counts = verdict_counts(table)
    yield Glue("claims_counts", counts)
    yield Glue("claims_counts_text", Plain(counts_sentence(counts)))
    yield Show(counts)
    shown, notes = readable(table)
    yield Show(shown.style.hide(axis="index"))
    yield Show(Markdown("Sources: " + "; ".join(notes) + "."))


def _sweep_label(run: RunData) -> str:
    return (f"designed {100 * run.config.raw['design']['stall_share']:.2g}%, measured "
            f"{100 * regime(run)['realized_stall_share']:.2g}%")


def claims_over_stall_share(sensitivity_root: str) -> Iterator[Item]:
    """Why a design implies a verdict, and the measured CPU rows' verdicts at each stall share of the sweep."""
    yield Show(design_reasons().style.hide(axis="index"))
    runs = [load_run(d) for d in run_folders([sensitivity_root]) if d.name.startswith("stalls-cpu-tiny-")]
    if not runs:
        yield Say(f"no stalls-cpu-tiny-* runs under {sensitivity_root}: the measured verdicts are shown at one stall "
                  "share only")
        return
    sweep = dict(sorted(((_sweep_label(r), r) for r in runs), key=lambda kv: kv[1].config.raw["design"]["stall_share"]))
    held = sensitivity(load_claims(), sweep)
    yield Glue("claims_sensitivity", held)
    yield Show(held.style.set_caption(f"The measured CPU rows on the stall-share sweep "
                                      f"({figures.provenance(next(iter(sweep.values())))}; stall share = stock's gaps "
                                      "above T*)"))


def stability(stability_root: str, run: RunData) -> Iterator[Item]:
    """The measured rows' verdicts in each repetition of the default design, beside the book's run where it is
    one of them (a CPU run of the default design)."""
    reps = repetitions(stability_root)
    same_design = evidence("paired", run) == EVIDENCE[0]
    table = stability_table(reps, book=run if same_design else None)
    words = stability_words(table)
    yield Glue("stability_summary", Plain(words))
    if len(table):
        first = next(iter(reps.values()))
        yield Glue("stability_table", table.style.set_caption(
            f"The measured rows' verdicts in each repetition of the default paired design ({len(reps)} complete "
            f"under {stability_root}; {figures.provenance(first)}), how many reproduced the claim, and whether all "
            "agree."))
    else:
        yield Glue("stability_table", pd.DataFrame({"stability study": [f"no complete repetition under "
                                                                        f"{stability_root}"]}).style.hide(axis="index"))
    yield Say(words)
