"""The results chapter's headline: the paired run's numbers the book's prose pastes (the effect on P99 ITL
and TTFT in the words their intervals allow, stall shares, the regime), what the paper reports beside them,
and the side-by-side table of the two, as :mod:`dlfp.book.page` items. The paper's numbers come from
:mod:`dlfp.analysis.paper`, so no page types them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd

from dlfp.analysis.figures import provenance
from dlfp.analysis.labels import scope_note, stock_budget
from dlfp.analysis.paper import PAPER, percents, reported_itl
from dlfp.analysis.runs import RunData, stall_threshold_s
from dlfp.analysis.stats import effect_words, paired, t_ci
from dlfp.analysis.tables import regime
from dlfp.book.notebook import Plain, run_label
from dlfp.book.page import Glue, Item


def ci_text(p: Mapping[str, Any], sign: int = 1) -> Plain:
    """A paired interval as the prose gives it, low to high after ``sign`` (-1: an increase read as one)."""
    if "t_lo" not in p:
        return Plain("one trial: no interval")
    lo, hi = sorted((sign * p["t_lo"], sign * p["t_hi"]))
    return Plain(f"{lo:.1f}% to {hi:.1f}%")


def glues(run: RunData, rows: pd.DataFrame, run_dir: str) -> Iterator[Item]:
    """The run's numbers and the paper's, glued for the pages' prose (``rows``: :func:`trial_rows` of ``run``)."""
    yield Glue("source", Plain(provenance(run)))
    yield Glue("run_label", Plain(run_label(run_dir)))
    yield Glue("n_trials", len(run.trials))
    yield Glue("stock_budget", stock_budget(run))
    yield Glue("stall_ms", stall_threshold_s(run.config) * 1e3)
    yield Glue("regime", Plain(regime(run, rows)["verdict"]))
    yield Glue("scope_note", Plain(scope_note(run)))
    itl, ttft = paired(rows, "itl_p99_ms"), paired(rows, "ttft_p99_ms")
    yield Glue("itl_effect", Plain(effect_words(itl)))
    yield Glue("itl_ci", ci_text(itl))
    yield Glue("ttft_effect", Plain(effect_words(ttft)))
    yield Glue("ttft_ci", ci_text(ttft, sign=-1))
    stalls = rows.groupby("arm").stall_share.mean()
    yield Glue("stalls_stock", Plain(f"{100 * stalls['stock']:.1f}%"))
    yield Glue("stalls_dlfp", Plain(f"{100 * stalls['dlfp']:.1f}%"))
    yield Glue("paper_setting", Plain(PAPER["setting"]))
    yield Glue("paper_trials", Plain(f"{PAPER['trials']} paired {PAPER['requests']}-request trials"))
    yield Glue("paper_itl_trials", Plain(percents(PAPER["itl_reduction_pct"])))
    yield Glue("paper_itl_mean", Plain(f"{PAPER['mean_pct']:.1f}%"))
    yield Glue("paper_itl_ci", Plain(f"{PAPER['ci_pct'][0]:.1f}% to {PAPER['ci_pct'][1]:.1f}%"))
    yield Glue("paper_ttft", Plain(f"{PAPER['ttft_increase_pct']:.1f}%"))
    _, lo, hi = t_ci(PAPER["itl_reduction_pct"])
    yield Glue("paper_ci_recomputed", Plain(f"{lo:.2f}% to {hi:.2f}%"))


def _values(vals: Any) -> str:
    return ", ".join(f"{v:.1f}" for v in vals)


def side_by_side(run: RunData, rows: pd.DataFrame) -> Any:
    """The P99 ITL reduction, ours and the paper's, in one captioned table (a Styler)."""
    p = paired(rows, "itl_p99_ms")
    resampled = (f"{p['boot_lo']:.1f} to {p['boot_hi']:.1f}" if "boot_lo" in p
                 else f"not reported ({len(p['reductions_pct'])} trials: a resampled interval of so few values is "
                      "no CI)")
    side = pd.DataFrame([
        {"source": f"{provenance(run)}; stock budget {stock_budget(run)}",
         "per-trial reduction (%)": _values(p["reductions_pct"]), "mean (%)": f"{p['mean_pct']:.1f}",
         "paired 95% CI, t (%)": ci_text(p), "bootstrap 95% CI (%)": resampled, "verdict": effect_words(p)},
        {"source": f"reported by the paper ({PAPER['setting']}); stock budget not stated",
         "per-trial reduction (%)": _values(PAPER["itl_reduction_pct"]), "mean (%)": f"{PAPER['mean_pct']:.1f}",
         "paired 95% CI, t (%)": f"{PAPER['ci_pct'][0]:.1f} to {PAPER['ci_pct'][1]:.1f}",
         "bootstrap 95% CI (%)": "not reported", "verdict": effect_words(reported_itl())},
    ])
    return side.style.hide(axis="index").set_caption("P99 ITL reduction, stock to DLFP: ours and the paper's, side "
                                                     "by side")
