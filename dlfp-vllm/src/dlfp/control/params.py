"""DLFP parameters: every knob with its default, unit and valid range, declared once on its field.

The declaration drives validation of vLLM's ``additional_config["dlfp"]``, the parameter table
(:data:`SPECS`: the method chapter's, and the plug-in README's, :func:`markdown_table`) and the error
messages, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dlfp.control.fields import declared, number, path, refuse_invalid, switch, word
from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.registry import NAMES, REGISTRY

SIGNALS = ("schedule", "completion")
"""Feedback signals: ``schedule`` is the paper's scheduler-call interval; ``completion``
is the model-execution completion cadence (the completion-timed controller)."""


class DLFPConfigError(ValueError):
    """A DLFP parameter is unknown, of the wrong type or out of range."""


CONTROLLERS = NAMES
"""What sizes a mixed step: a name of :mod:`dlfp.control.registry` (``law``: the paper's proportional
feedback on one interval; ``slo``: an online step-cost fit solved for the ITL SLO, trimmed by tail feedback)."""
TARGETS = ("slo", "decode")
"""Where T* comes from: ``slo`` (the paper's: a fraction of the ITL SLO) or ``decode`` (a multiple
of the decode-only step the engine is measured to take right now)."""


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One parameter as the reference table shows it (generated from :class:`DLFPParams`' fields)."""

    name: str
    default: Any
    unit: str
    allowed: str
    doc: str


_MAX_TOKENS = 1 << 20
_MAX_EVERY = 1024
"""Longest prefill cadence: a bound against typos; a baseline sweeps 2-8, and at 1024 a prompt behind
running decodes already waits a thousand decode steps per chunk."""


@dataclass(frozen=True, slots=True)
class DLFPParams:
    """Validated DLFP parameters; construct with :func:`parse_params` or keyword arguments.

    Each field declares its unit, its bounds and its help once (:mod:`dlfp.control.fields`); the
    validation, the error messages and :data:`SPECS` are generated from them. A bound may name an
    earlier field (``chunk_init`` lies in ``[chunk_min, chunk_max]``).
    """

    enabled: bool = switch(True, "Switch control off to get stock scheduling with the same instrumentation.")
    controller: str = word(
        "law", lambda: tuple(REGISTRY),  # read at each check: a later entry counts
        "What sizes a mixed step: " + "; ".join(f"{e.name}, {e.doc}" for e in REGISTRY.values())
        + " (slo reads itl_slo_ms, chunk_min, chunk_max, none of the law's knobs).")
    itl_slo_ms: float = number(100.0, "ms", 0, 60000, "Inter-token latency SLO the target interval derives from.",
                               lo_open=True)
    target_fraction: float = number(0.5, "-", 0, 1, "Target interval T* = target_fraction x itl_slo_ms; headroom "
                                    "for jitter.", lo_open=True)
    gain: float = number(0.5, "-", 0, 2, "Proportional gain k of the law.", lo_open=True)
    chunk_min: int = number(32, "tokens", 1, _MAX_TOKENS, "Smallest prefill chunk a mixed step may get.")
    chunk_max: int = number(2048, "tokens", "chunk_min", _MAX_TOKENS, "Largest prefill chunk a mixed step may get.")
    chunk_init: int = number(256, "tokens", "chunk_min", "chunk_max", "Chunk before the first guarded cycle.")
    anti_windup: bool = switch(False, "Grow the chunk only after a step whose prefill filled its cap (off: the "
                               "paper's law).")
    signal: str = word("schedule", SIGNALS, "Interval fed to the law: scheduler-call interval (paper) or "
                       "completion cadence.")
    target: str = word("slo", TARGETS, "T* from the SLO (paper) or target_decode_steps x the measured "
                       "decode-only step.")
    target_decode_steps: float = number(
        4.0, "steps", 1, 1000, "With target: decode, T* in decode-only steps (measured online, completion "
        "cadence).", lo_open=True)
    pressure_decodes: int = number(
        1, "requests", 1, _MAX_TOKENS, "Act only when at least this many requests are decoding (1: whenever "
        "prefill meets a decode).")
    prefill_every: int = number(
        1, "steps", 1, _MAX_EVERY, "Prefill cadence: with decodes running, admit prefill only on every N-th step "
        "(1: every step). Independent of enabled: with control off, a cadence baseline with stock's chunks.")
    prefill_interval: int = number(
        1, "steps", 1, _MAX_EVERY, "vLLM's prefill schedule interval on one engine (PR 44558's mechanism, PR "
        "54627's single-engine clock): with decodes running, prefill waits until N-1 steps without prefill have "
        "passed since the last step that carried some, unless vLLM's saturation guard finds that step could not "
        "drain the waiting queue (1: off). Not with prefill_every.")
    ttft_slo_ms: float = number(
        1000.0, "ms", 0, 3_600_000, "Time-to-first-token SLO: a prompt's first token is due this long after the "
        "scheduler first sees it (read by controllers that plan to prompts' deadlines, deadline), and the "
        "saturation guard's wait.", lo_open=True)
    saturation_guard: bool = switch(
        True, "Once the oldest prompt still to prefill has waited ttft_slo_ms, run the step unrestricted, whatever "
        "the controller decided, so no controller starves prefill (off: the paper's law as published, which the "
        "artifact's paired trials reproduce).")
    step_log: str | None = path("JSON-lines file for per-step records (appended; null: no records).")

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def ttft_slo_s(self) -> float:
        """The TTFT SLO in seconds: each prompt's deadline after the scheduler first sees it, and the wait
        at which the saturation guard releases a step."""
        return self.ttft_slo_ms / 1000.0

    @property
    def target_interval_s(self) -> float:
        """T*, the interval the law steers toward, in seconds."""
        return self.itl_slo_ms * self.target_fraction / 1000.0


SPECS: tuple[ParamSpec, ...] = tuple(
    ParamSpec(f.name, f.default, rule.unit, rule.allowed, rule.doc) for f, rule in declared(DLFPParams))
"""Every parameter in order, with its default, unit, allowed values and help: the reference table."""


def markdown_table() -> str:
    """:data:`SPECS` as a Markdown table (defaults as JSON, as a config writes them): the plug-in's README
    holds exactly this text, and its tests compare the two."""
    return fields_table(DLFPParams, "parameter")


def _validate(p: DLFPParams) -> None:
    refuse_invalid(p, lambda name, value, allowed: DLFPConfigError(f"dlfp parameter {name!r} = {value!r} is invalid: "
                                                          f"allowed {allowed}"))  # and 64.0 counts as 64 from here on
    if p.prefill_every > 1 and p.prefill_interval > 1:
        raise DLFPConfigError(f"dlfp parameters 'prefill_every' = {p.prefill_every} and 'prefill_interval' = "
                              f"{p.prefill_interval} are two cadences: set at most one above 1")


def parse_params(raw: Mapping[str, Any] | None) -> DLFPParams:
    """Build parameters from a user mapping; unknown keys are refused by name."""
    raw = dict(raw or {})
    known = {f.name for f in fields(DLFPParams)}
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise DLFPConfigError(
            f"unknown dlfp parameter(s) {unknown}; known: {sorted(known)}"
        )
    return DLFPParams(**raw)
