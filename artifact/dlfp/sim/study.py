"""The modeled generalization study's design: one load and one latency target per profile.

A fixed arrival rate cannot serve Qwen3-0.6B and Qwen3-32B alike: a rate that loads the
small model lightly overloads the large one, and a rate the large one sustains leaves the
small one's prefill stalls so rare that they never reach its P99 inter-token latency (P99
of pooled gaps only sees stalls that are more than 1% of all gaps). So every run is set
relative to its own modeled *decode step* ``d``: the step time of a few decodes at a
typical context, from the same cost profile that runs the simulation.

* arrival rate ``= LONG_STEP_SHARE / (long_weight * d)``: long prompts arrive once every
  ``1 / LONG_STEP_SHARE`` decode steps, so stock vLLM's prefill stalls are the same share
  of steps (about 2%) for every model, and decode concurrency is alike too;
* DLFP's ITL objective ``itl_slo_ms = ITL_SLO_STEPS * d`` (target ``T* = 2 d`` with the
  default ``target_fraction`` 0.5): a practitioner's SLO scales with what the model can do;
* SLOs for compliance: TPOT at the same ``4 d``, TTFT at ``TTFT_SLO_STEPS * d``.

The controller's parameters are otherwise the defaults for every run: DLFP is model-free,
and the study asks whether one controller carries over, as the paper does. A run may name
a controller variant (``dlfp: {signal: completion}``, ``{anti_windup: true}``) to ask what
changes the outcome; its folder name says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlfp.sim.costmodel import ModelShape, Profile, step_time

LONG_STEP_SHARE = 0.02
ITL_SLO_STEPS = 4.0
TTFT_SLO_STEPS = 100.0
REFERENCE_DECODES = 4
REFERENCE_CONTEXT = 1024


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
    {"profile": "a100", "model": "qwen3-0.6b", "tp": 1, "dlfp": {"anti_windup": True}},
    {"profile": "a100", "model": "qwen3-0.6b", "tp": 1, "dlfp": {"signal": "completion"}},
    {"profile": "a100", "model": "qwen3-0.6b", "tp": 1, "dlfp": {"anti_windup": True, "signal": "completion"}},
    {"profile": "a100", "model": "qwen3-8b", "tp": 1, "dlfp": {"signal": "completion"}},
)
"""The committed study (``data/runs/generalization-sim``): the paper's settings (A100 with
Qwen3-0.6B, 8B, 32B, 8B at TP=2, and H200), then controller variants on Qwen3-0.6B, where the
paper's law fails in the model, and the completion signal on Qwen3-8B, where it works."""


def glue_key(label: str) -> str:
    """A run label as a Jupyter Book glue key (letters, digits, underscores)."""
    return "sim_" + "".join(ch if ch.isalnum() else "_" for ch in label)


def decode_step_s(shape: ModelShape, profile: Profile, tp: int, dtype_bytes: int) -> float:
    """Modeled time (host + GPU) of a step of ``REFERENCE_DECODES`` decodes at ``REFERENCE_CONTEXT``."""
    cost = step_time(shape, profile, [(1, REFERENCE_CONTEXT)] * REFERENCE_DECODES, tp, dtype_bytes)
    return cost.gpu_s + cost.host_s


def scaled_settings(decode_s: float, long_weight: float) -> dict[str, Any]:
    """Config overrides that put a run at the study's relative load and targets (module doc).

    Values are rounded so that a run folder's recorded config reads cleanly and a rerun of
    the same plan matches it exactly.
    """
    if not decode_s > 0 or not 0 < long_weight <= 1:
        raise ValueError(f"need a positive decode step and a long-prompt weight in (0, 1], got {decode_s}, "
                         f"{long_weight}")
    step_ms = decode_s * 1e3
    return {
        "workload": {"rate_rps": round(LONG_STEP_SHARE / (long_weight * decode_s), 2)},
        "dlfp": {"itl_slo_ms": round(ITL_SLO_STEPS * step_ms, 2)},
        "slo": {"tpot_ms": round(ITL_SLO_STEPS * step_ms, 2), "ttft_ms": round(TTFT_SLO_STEPS * step_ms, 1)},
    }
