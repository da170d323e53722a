"""What a design predicts from the pre-flight's measurements and a workload's facts: stall share and loads.

Pure arithmetic (:mod:`dlfp.trials.design` derives and checks designs from it; the module
docstring there gives the model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Measured:
    """What the pre-flight measured on the engine (seconds).

    A mixed step of ``n`` prefill tokens beside the running decodes takes
    ``decode_s + prefill_fixed_s + prefill_per_token_s * n``; a decode-only step ``decode_s``.
    """

    decode_s: float
    prefill_fixed_s: float
    prefill_per_token_s: float
    decoders: int
    source: str

    def __post_init__(self) -> None:
        if not (self.decode_s > 0 and self.prefill_per_token_s > 0 and self.prefill_fixed_s >= 0):
            raise ValueError(f"pre-flight measured an impossible engine: decode step {self.decode_s!r} s, prefill "
                             f"{self.prefill_fixed_s!r} s + {self.prefill_per_token_s!r} s/token")

    def mixed_step_s(self, prefill_tokens: float) -> float:
        return self.decode_s + self.prefill_fixed_s + self.prefill_per_token_s * prefill_tokens

    def chunk_for(self, step_s: float) -> float:
        """Prefill tokens that make a mixed step last ``step_s`` (0 when even an empty one is longer)."""
        return max(0.0, (step_s - self.decode_s - self.prefill_fixed_s) / self.prefill_per_token_s)


@dataclass(frozen=True, slots=True)
class Workload:
    """The request mix facts a design needs, read from a trial config's workload."""

    long_prompt: float
    """Median prompt length of the long class (the class with the longest median prompt)."""
    short_prompt: float
    short_output: float
    """Mean prompt and output length of the other classes (weighted by class weight)."""
    long_output: float
    stock_budget: int
    """Stock's ``max_num_batched_tokens``: a long prompt above it is prefilled in several steps."""
    max_prompt: int = 1 << 20
    """Longest prompt the model length allows beside the long class's longest output."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """What a design predicts for stock and DLFP, before any trial."""

    long_rate_rps: float
    short_rate_rps: float
    stall_s: float
    stall_steps: int
    stall_share: float
    stock_load: float
    dlfp_load: float
    target_s: float

    @property
    def rate_rps(self) -> float:
        return self.long_rate_rps + self.short_rate_rps

    @property
    def long_share(self) -> float:
        return self.long_rate_rps / self.rate_rps


def round_sig(x: float, digits: int = 3) -> float:
    """Round to ``digits`` significant digits, so derived values read cleanly where they are recorded."""
    return float(f"{x:.{digits}g}")


def long_prefill(m: Measured, w: Workload) -> tuple[float, int]:
    """Stock's prefill of one median long prompt: total time and steps (budget-sized chunks)."""
    steps = max(1, math.ceil(w.long_prompt / w.stock_budget))
    return steps * m.prefill_fixed_s + m.prefill_per_token_s * w.long_prompt, steps


def predict(m: Measured, w: Workload, long_rate: float, short_rate: float, target_s: float) -> Prediction:
    """Stall share and loads of a design (module docstring), for stock and for DLFP at ``target_s``."""
    prefill_s, steps = long_prefill(m, w)
    short_s = m.prefill_fixed_s + m.prefill_per_token_s * w.short_prompt
    u = long_rate * prefill_s
    stock_load = u + short_rate * short_s
    stall_rate = long_rate * steps
    share = stall_rate / ((1 - min(u, 0.999)) / m.decode_s + stall_rate)
    # DLFP splits a long prefill into chunks whose steps last ``target_s``, each carrying a decode
    # step and the fixed prefill cost: its prefill takes target / (target - d - a) times longer.
    useful = target_s - m.decode_s - m.prefill_fixed_s
    stretch = target_s / useful if useful > 0 else math.inf
    dlfp_load = u * stretch + short_rate * short_s
    stall_s = m.mixed_step_s(min(w.long_prompt, w.stock_budget))
    return Prediction(long_rate, short_rate, stall_s, steps, share, stock_load, dlfp_load, target_s)


def scaled_rates(m: Measured, w: Workload, share: float, decoders: float) -> tuple[float, float]:
    """Long and short arrival rates that put stock's stalls at ``share`` of the gaps (module doc)."""
    prefill_s, steps = long_prefill(m, w)
    # Invert s = L k / ((1 - L P) / d + L k) for L: L = s / (k d (1 - s) + s P).
    long_rate = share / (steps * m.decode_s * (1 - share) + share * prefill_s)
    u = long_rate * prefill_s
    short_rate = decoders * (1 - u) / (w.short_output * m.decode_s)
    return long_rate, short_rate


def long_class_index(classes: Sequence[Mapping[str, Any]]) -> int:
    """The long-prompt class: the one with the largest median prompt length."""
    from dlfp.harness.workload import LengthDist

    medians = [median_length(LengthDist.parse(c["prompt_len"])) for c in classes]
    return max(range(len(classes)), key=medians.__getitem__)


def long_weight_share(classes: list[Mapping[str, Any]]) -> float:
    weights = [float(c.get("weight", 1.0)) for c in classes]
    return weights[long_class_index(classes)] / sum(weights)


def median_length(dist: Any) -> float:
    if dist.kind == "lognormal":
        return float(dist.median)
    return (dist.lo + dist.hi) / 2


def mean_length(dist: Any) -> float:
    """The mean of a class's drawn lengths, clipping included (:meth:`dlfp.harness.lengths.LengthDist.mean_length`):
    the design's loads follow what the workload sends, not the unclipped distribution's mean."""
    return dist.mean_length()


def workload_facts(config: Mapping[str, Any]) -> Workload:
    """The :class:`Workload` facts of a trial config's raw mapping (classes, stock budget)."""
    from dlfp.harness.workload import LengthDist

    classes = config["workload"]["classes"]
    i = long_class_index(classes)
    long_c = classes[i]
    others = [c for j, c in enumerate(classes) if j != i] or [long_c]
    weights = [float(c.get("weight", 1.0)) for c in others]

    def mean_of(key: str) -> float:
        lengths = (mean_length(LengthDist.parse(c[key])) for c in others)
        return sum(wt * n for wt, n in zip(weights, lengths, strict=True)) / sum(weights)

    model_len = min(int(config["engine"]["max_model_len"]), int(config["workload"].get("max_model_len") or 1 << 30))
    return Workload(long_prompt=median_length(LengthDist.parse(long_c["prompt_len"])),
                    short_prompt=mean_of("prompt_len"),
                    short_output=mean_of("output_len"), long_output=mean_length(LengthDist.parse(long_c["output_len"])),
                    stock_budget=int(config["engine"]["max_num_batched_tokens"]),
                    max_prompt=model_len - LengthDist.parse(long_c["output_len"]).hi)


def probe_sizes(w: Workload, decoders: int) -> tuple[int, ...]:
    """Prefill sizes the pre-flight times: a quarter, half and all of the longest prefill step stock
    can take (its budget beside ``decoders`` decodes, within the model length), so the fit covers any
    long prompt a design may choose and each probe is one step."""
    full = int(min(w.stock_budget - decoders, w.max_prompt))
    return tuple(sorted({max(16, full // 4), max(16, full // 2), full}))
