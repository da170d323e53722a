"""The capacity sweep's design: SLO levels from the pre-flight, the rate at a given load, the bound.

A deployer's question is how much load fits under an ITL and a TTFT SLO. The SLOs must be chosen by
no arm, and mean the same on every target, so they are multiples of what the pre-flight measures
physically on the reference engine (stock):

* the ITL SLO is a multiple of the decode-only step ``d`` (:data:`ITL_STEPS`: 5x and 25x, as
  Sarathi-Serve sets its strict and relaxed P99 time-between-tokens SLOs from a decode iteration's
  time, by our reading of its evaluation; the multiples are ours to own either way);
* the TTFT SLO is a multiple of the isolated stock prefill of a median long prompt ``P``
  (:data:`TTFT_PREFILLS`): time to first token can never be below ``P``, and prefilling it in
  SLO-sized chunks beside decodes stretches it by ``T / (T - d - a)``.

Rates are set as a *load*: the share of engine time stock would spend prefilling, ``rho = R x
(w_L P + (1 - w_L) p_s)`` for the request mix's long share ``w_L`` and short prefill ``p_s`` (the same
arithmetic as :func:`dlfp.trials.prediction.predict`'s ``stock_load``). A load means the same on
every machine, so one list of loads (:data:`LOADS`) spans light load to past stock's saturation on
every target. Every arm of a sweep point runs that point's rate on the same seeded workloads.

The bound (:func:`capacity_bound`): with every step sized exactly to the ITL SLO ``T``, a step
carries ``c = (T - d - a) / e`` prefill tokens beside the decodes, so the engine prefills ``c / T``
tokens a second; the arriving prompts need ``R x mean prompt`` a second. The rate where the two meet
is what any chunking policy can sustain under that SLO, queueing aside and with the decode floor
held at the pre-flight's ``d`` (a batch with more decodes has a higher floor: the bound is optimistic
there, and says so in the book).

Pure arithmetic over :class:`~dlfp.trials.prediction.Measured` and the workload's facts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dlfp.trials.prediction import Measured, Workload, long_prefill, round_sig

LEVELS = ("tight", "relaxed")
"""The two SLO levels of the capacity study."""
GIVEN = "given"
"""The one SLO level of a sweep whose SLOs a user gives (``design.itl_slo_ms`` and ``design.ttft_slo_ms``,
as ``dlfp plan`` sets them) instead of deriving them from the pre-flight."""
KNOWN_LEVELS = (*LEVELS, GIVEN)
ITL_STEPS: dict[str, float] = {"tight": 5.0, "relaxed": 25.0}
"""ITL SLO per level, in measured decode-only steps (after Sarathi-Serve's strict and relaxed SLOs)."""
TTFT_PREFILLS: dict[str, float] = {"tight": 3.0, "relaxed": 10.0}
"""TTFT SLO per level, in isolated stock prefills of a median long prompt."""
LOADS = (0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 1.2)
"""Sweep points as stock's predicted prefill load: from light load to past saturation of prefill
alone (decode steps come on top), finer where the tight level's capacities fell in a development
run (0.45-0.7 on the modeled A100 with Qwen3-0.6B). One point lies above 1.0: the prediction charges
each prompt its fixed prefill cost, which prompts batched into one step share. Far above it the
client itself falls behind (at 1.7 there, requests went out up to 0.7 s late)."""
MIN_REQUESTS = 20
"""Fewest requests a sweep point replays (its pooled P99 needs a few thousand gaps)."""
MIN_SPAN_S = 4.0
"""Shortest arrival span of a sweep point, in seconds, however short its SLOs (the pooled P99s need a
steady state: 240 requests arrive in about a second on the modeled A100 with Qwen3-0.6B, where at
load 1.0 stock's P99 TTFT was within the relaxed SLO of 184 ms with 240 requests, and 2.1 s when they
spanned 4 s, development runs)."""
SPAN_TTFT_SLOS = 10.0
"""Shortest arrival span of a sweep point in TTFT SLOs (of the level with the longest one): a rate past
what an arm sustains passes a finite sweep point as long as the queue it builds stays under the TTFT
SLO. A rate ``1 + x`` times the sustainable one adds about ``x`` seconds of backlog per second of
arrivals, so over a span ``S`` an overload up to ``x = TTFT SLO / S`` can pass (:func:`resolution`):
at 10 SLOs, 10% at the relaxed level and 3% at the tight one. With a fixed 4 s span, the modeled A100
with Qwen3-8B (relaxed TTFT SLO 1.57 s) let every arm pass at 1.2 times stock's prefill load, past
what the GPU can prefill at all (the committed run of 88bae42)."""


def describe() -> str:
    """The sweep's design in one sentence, from the constants above (the book prints it beside the
    capacity figures rather than typing the numbers into its prose)."""
    levels = "; ".join(f"{lv}: ITL {ITL_STEPS[lv]:g} decode steps, TTFT {TTFT_PREFILLS[lv]:g} prefills"
                       for lv in LEVELS)
    return (f"Design (dlfp.trials.sweep): {len(LOADS)} loads, {', '.join(f'{x:g}' for x in LOADS)} of stock's "
            f"predicted prefill load, every point at least {MIN_SPAN_S:g} s and {SPAN_TTFT_SLOS:g} TTFT SLOs of "
            f"arrivals; SLO levels from the pre-flight, {levels}.")


def min_span_s(levels: Mapping[str, Mapping[str, float]]) -> float:
    """The shortest arrival span a point of a sweep with these SLO levels may have (seconds):
    :data:`MIN_SPAN_S`, or :data:`SPAN_TTFT_SLOS` times the longest TTFT SLO where that is longer."""
    return max(MIN_SPAN_S, SPAN_TTFT_SLOS * max(float(v["ttft_ms"]) for v in levels.values()) / 1e3)


def resolution(ttft_slo_ms: float, span_s: float) -> float:
    """The largest overload (a share of the sustainable rate) that a point spanning ``span_s`` of
    arrivals can let pass under a TTFT SLO of ``ttft_slo_ms`` (:data:`SPAN_TTFT_SLOS`)."""
    if not span_s > 0:
        raise ValueError(f"a sweep point's span must be > 0 s; got {span_s!r}")
    return ttft_slo_ms / 1e3 / span_s


def top_requests(n_requests: int, top_rate_rps: float, span_s: float) -> int:
    """Requests of the top load's point: the config's ``n_requests``, or more where they would arrive
    in less than ``span_s`` (:func:`min_span_s`) at ``top_rate_rps``."""
    return max(n_requests, math.ceil(span_s * top_rate_rps))


def requests_at_load(load: float, n_top: int) -> int:
    """Requests a point at ``load`` replays when the top load of :data:`LOADS` replays ``n_top``: the same
    arrival span at every load (a fixed count would give high rates a span too short to reach a steady state,
    and low rates one long for nothing; a grid reaching past :data:`LOADS` replays more), but at least
    :data:`MIN_REQUESTS`; the first of the trial's."""
    return max(MIN_REQUESTS, round(n_top * load / LOADS[-1]))


def slo_levels(m: Measured, w: Workload) -> dict[str, dict[str, float]]:
    """Per level: ``itl_ms`` and ``ttft_ms`` from the measured decode step and long prefill (ms, 3 digits)."""
    prefill_s, _ = long_prefill(m, w)
    return {level: {"itl_ms": round_sig(ITL_STEPS[level] * m.decode_s * 1e3),
                    "ttft_ms": round_sig(TTFT_PREFILLS[level] * prefill_s * 1e3)} for level in LEVELS}


def load_per_rps(m: Measured, w: Workload, long_share: float) -> float:
    """Seconds of stock prefill per second of time, per request per second of arrivals."""
    prefill_s, _ = long_prefill(m, w)
    short_s = m.prefill_fixed_s + m.prefill_per_token_s * w.short_prompt
    return long_share * prefill_s + (1 - long_share) * short_s


def rate_at_load(m: Measured, w: Workload, long_share: float, load: float) -> float:
    """The arrival rate (requests/s) at which stock's predicted prefill load is ``load``."""
    if not load > 0:
        raise ValueError(f"design.load = {load!r} is invalid: allowed a share > 0")
    return load / load_per_rps(m, w, long_share)


def capacity_bound(m: Measured, w: Workload, long_share: float, itl_slo_s: float) -> float:
    """Requests/s at which steps sized exactly to ``itl_slo_s`` just keep up with arriving prefill
    work (module docstring); 0 where even a step without prefill tokens exceeds the SLO."""
    tokens = m.chunk_for(itl_slo_s)
    mean_prompt = long_share * w.long_prompt + (1 - long_share) * w.short_prompt
    return tokens / itl_slo_s / mean_prompt


def derived_slos(levels: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The SLO values an arm may name (``@itl_slo_tight``, ``@ttft_slo_relaxed``, ...)."""
    return {**{f"@itl_slo_{level}": float(v["itl_ms"]) for level, v in levels.items()},
            **{f"@ttft_slo_{level}": float(v["ttft_ms"]) for level, v in levels.items()}}


def sweep_record(m: Measured, w: Workload, long_share: float, load: float,
                 given: Mapping[str, float] | None = None) -> dict[str, Any]:
    """What a sweep point records in its design: load, rate, the SLO levels (:func:`slo_levels`, or the one
    ``given`` level: ``{"itl_ms": ..., "ttft_ms": ...}``) and the bound per level."""
    levels = {GIVEN: {"itl_ms": float(given["itl_ms"]), "ttft_ms": float(given["ttft_ms"])}} if given else \
        slo_levels(m, w)
    bounds = {lv: round_sig(capacity_bound(m, w, long_share, v["itl_ms"] / 1e3)) for lv, v in levels.items()}
    return {"load": load, "rate_rps": round_sig(rate_at_load(m, w, long_share, load)), "slos": levels,
            "bound_rps": bounds}

