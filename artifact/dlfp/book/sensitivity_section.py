"""The results chapter's sensitivity section: DLFP's parameters varied one at a time, and the stall-share
sweeps that place the boundary of its regime, from the sensitivity study's runs (``dlfp study
sensitivity``), as :mod:`dlfp.book.page` items."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from dlfp.analysis import figures
from dlfp.analysis.labels import source_kind
from dlfp.analysis.runs import load_run
from dlfp.analysis.tables import arms_table, generalization_table
from dlfp.book.notebook import Plain
from dlfp.book.page import Figure, Glue, Item, Say, Show
from dlfp.studies.boundary import regime_table
from dlfp.studies.frontier import effects_table
from dlfp.studies.plans import STALL_SHARES
from dlfp.trials.provenance import run_folders

SWEEP_COLUMNS = ["run", "source", "prefill stalls stock (% of gaps)", "ITL reduction (%)", "ITL CI lo (%)",
                 "ITL CI hi (%)", "trials", "regime"]


def section(root: str) -> Iterator[Item]:
    """Everything the section shows and glues, in the page's order (``root``: the study's folder)."""
    runs = {d.name: load_run(d) for d in run_folders([root])}
    if "params" in runs:
        params = arms_table(runs["params"])
        source = figures.provenance(runs["params"])
        yield Show(params.style.format(precision=2).hide(axis="index").set_caption(source))
        varied = [a for a in params.arm if a != "stock"]
        yield Glue("sensitivity_params_table", effects_table(
            {"P99 ITL reduction vs stock (paired 95% CI)": params}, varied).T.style.set_caption(
            f"DLFP's parameters varied one at a time ({source})"))
    else:
        yield Glue("sensitivity_params_table", Plain(f"(no params run in {root})"))
    sweeps, aimed = {}, {}
    for target in STALL_SHARES:  # one series per target that has runs
        series = [r for name, r in sorted(runs.items()) if name.startswith(f"stalls-{target}-")]
        if series:
            sweeps[target] = generalization_table(series)
            aimed[target] = [100 * r.config.raw["design"]["stall_share"] for r in series]  # what the design aimed at
    if not sweeps:
        note = f"no sensitivity runs under {root} (dlfp study sensitivity --out {root})"
        yield Glue("sensitivity_regime_table", pd.DataFrame({"stall-share sweep": [note]}).style.hide(axis="index"))
        yield Say(note)
        return
    yield Glue("sensitivity_regime_table", regime_table(sweeps, aimed).style.hide(axis="index").set_caption(
        "The stall-share sweeps: per target the runs (three paired trials each), the stall shares the design aimed "
        "at and those measured in stock's gaps, the measured shares at which DLFP's P99 ITL gain was detectable "
        "or not (paired 95% interval), and what that says about a boundary. Sources: "
        + "; ".join(s.source.iloc[0] for s in sweeps.values())))
    words = "; ".join(f"{t} {source_kind(s.source.iloc[0])}" for t, s in sweeps.items())
    yield Figure(
        figures.regime_boundary(sweeps, f"DLFP's gain against the stall share observed in stock's gaps ({words})"),
        "DLFP's P99 ITL reduction against the share of stock's inter-token gaps that were prefill stalls, "
        "measured in each sweep run (mean and paired 95% interval per run, log axis). Below about 1% of gaps "
        "(dotted line) a pooled P99 does not see the stalls at all; where a series crosses zero, DLFP's gain "
        f"turns into a loss. {words}.")
    yield Show(pd.concat(sweeps.values())[SWEEP_COLUMNS].style.format(precision=2).hide(axis="index"))
