"""The plain-text report of a run (``dlfp analyze``): its tables and effect words, from traces alone."""

from __future__ import annotations

from dlfp.analysis.labels import source_line, stock_budget
from dlfp.analysis.runs import RunData, stall_threshold_s, trial_rows
from dlfp.analysis.stats import effect_words, paired
from dlfp.analysis.tables import HEADLINE, arms_table, paper_table, regime
from dlfp.trials.arms import REFERENCE


def format_report(run: RunData) -> str:
    """The text ``dlfp analyze`` prints."""
    rows = trial_rows(run)
    if rows.empty:
        return f"{run.path}: no trial has all arms complete yet (missing: {run.manifest.missing})"
    lines = [
        f"run {run.path} ({run.manifest.name}, status {run.manifest.status}"
        + (", PARTIAL: only its finished arms" if run.partial else "") + ")",
        source_line(run),
        f"stock token budget (max_num_batched_tokens): {stock_budget(run)}; stall = gap above "
        f"{stall_threshold_s(run.config) * 1e3:.1f} ms; regime: {regime(run, rows)['verdict']}",
        "",
    ]
    if "dlfp" in run.arms:
        lines += [paper_table(rows).to_string(float_format=lambda x: f"{x:.2f}"), ""]
    if len(run.arms) > 2 or "dlfp" not in run.arms:
        lines += [arms_table(run, rows).to_string(index=False, float_format=lambda x: f"{x:.2f}"), ""]
    for arm in [a for a in run.arms if a != REFERENCE]:
        for metric in HEADLINE:
            p = paired(rows, metric, arm)
            line = f"{arm} {metric}: mean reduction {p['mean_pct']:.1f}%"
            if "t_lo" in p:
                line += (f", paired 95% CI (Student's t, {len(p['reductions_pct']) - 1} df) "
                         f"[{p['t_lo']:.1f}%, {p['t_hi']:.1f}%]")
            if "boot_lo" in p:
                line += f", bootstrap [{p['boot_lo']:.1f}%, {p['boot_hi']:.1f}%]"
            lines.append(line + f" ({effect_words(p)})")
    acc = rows[["prompt_mismatches", "output_mismatches", "n_recorded", "n_expected"]].sum()
    lines.append(f"token accounting: {int(acc.n_recorded)} of {int(acc.n_expected)} request-arms recorded; "
                 f"{int(acc.prompt_mismatches)} prompt and {int(acc.output_mismatches)} output mismatches")
    return "\n".join(lines)
