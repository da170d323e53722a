"""The modeled generalization study: which configurations run on the modeled accelerator.

Every run's load, DLFP target and SLOs come from its own pre-flight on the modeled engine, by
the same rules as the real runs (:mod:`dlfp.trials.design`): a fixed arrival rate cannot serve
Qwen3-0.6B and Qwen3-32B alike (a rate the large model sustains leaves the small one's stalls
too rare to reach its P99 ITL, a rate that loads the small one overloads the large one), and
a target fixed in milliseconds means a different number of steps for each.

The controller's parameters are otherwise the defaults for every run: DLFP is model-free,
and the study asks whether one controller carries over, as the paper does. A run may name
a controller variant (``dlfp: {signal: completion}``, ``{anti_windup: true}``) to ask what
changes the outcome; its folder name says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StudyRun:
    """One modeled configuration: cost profile, model shape, modeled TP size, and DLFP
    parameters that differ from the study's (a variant of the controller, e.g. its signal)."""

    profile: str
    model: str
    tp: int = 1
    dlfp: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        variant = "".join(f"-{k}-{str(v).lower()}" for k, v in sorted(self.dlfp.items()))
        return f"{self.profile}-{self.model}-tp{self.tp}{variant}"


STUDY_RUNS: tuple[dict[str, Any], ...] = (
    {"profile": "a100", "model": "qwen3-0.6b", "tp": 1},
    {"profile": "a100", "model": "qwen3-8b", "tp": 1},
    {"profile": "h200", "model": "qwen3-8b", "tp": 1},
    {"profile": "a100", "model": "qwen3-8b", "tp": 2},
    {"profile": "a100", "model": "qwen3-32b", "tp": 1},
)
"""The committed study (``data/runs/generalization-sim``): the paper's settings (A100 with
Qwen3-0.6B, 8B, 32B, 8B at TP=2) and the H200, each in the paper's design (three paired trials
of 100 requests). Controller variants on the same settings (completion signal, anti-windup, one
absolute target, the controller proposed here) are arms of the baselines study
(:mod:`dlfp.studies.plans`), where every variant shares its run's workload and design."""


def glue_key(label: str) -> str:
    """A run label as a Jupyter Book glue key (letters, digits, underscores)."""
    return "sim_" + "".join(ch if ch.isalnum() else "_" for ch in label)


GENERALIZATION_CAPTION = (
    "Per setting, DLFP's P99 ITL reduction against stock with its paired 95% interval (left; the shaded band "
    "is the paper's interval on Qwen3-0.6B and one A100, as it reports it, for orientation only), and the "
    "signal divergence (right): how far the scheduler-call interval DLFP feeds back strays from the completion "
    "cadence of the same steps, the mechanism the paper blames for its negative result. Simulated: vLLM's real "
    "scheduler over modeled accelerators (the cost profiles in the table), not GPU measurements."
)
"""The caption of the generalization figure, wherever a notebook draws it."""


def finding(table: Any, kind: str) -> str:
    """What a generalization table (:func:`dlfp.analysis.tables.generalization_table`) found, in one
    sentence for a chapter's opening: on how many settings DLFP's P99 ITL reduction is above zero
    (its paired 95% interval, that is), below zero, or neither, and the range of the means."""
    if not len(table):
        return f"{kind}: no runs."
    lo, hi, mean = table["ITL CI lo (%)"], table["ITL CI hi (%)"], table["ITL reduction (%)"]
    above, below = int((lo > 0).sum()), int((hi < 0).sum())
    unsure = len(table) - above - below
    words = [f"above zero on {above}", f"below zero on {below}", f"neither (or untested) on {unsure}"]
    return (f"{kind}: DLFP's P99 ITL reduction against stock (paired 95% CI) lies {', '.join(words[:2])} and "
            f"{words[2]} of {len(table)} settings; the means range from {mean.min():.1f}% to {mean.max():.1f}%.")
