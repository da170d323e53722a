"""DLFP parameters: every knob with its default, unit and valid range, validated in one place.

The same table drives validation of vLLM's ``additional_config["dlfp"]``, the method
chapter's parameter table and the error messages, so the three cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

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
    """Documentation and bounds for one parameter (inclusive bounds unless noted)."""

    name: str
    default: Any
    unit: str
    allowed: str
    doc: str


SPECS: tuple[ParamSpec, ...] = (
    ParamSpec("enabled", True, "-", "true or false",
              "Switch control off to get stock scheduling with the same instrumentation."),
    ParamSpec("controller", "law", "-", " or ".join(CONTROLLERS),
              "What sizes a mixed step: " + "; ".join(f"{e.name}, {e.doc}" for e in REGISTRY.values())
              + " (slo reads itl_slo_ms, chunk_min, chunk_max, none of the law's knobs)."),
    ParamSpec("itl_slo_ms", 100.0, "ms", "(0, 60000]",
              "Inter-token latency SLO the target interval derives from."),
    ParamSpec("target_fraction", 0.5, "-", "(0, 1]",
              "Target interval T* = target_fraction x itl_slo_ms; headroom for jitter."),
    ParamSpec("gain", 0.5, "-", "(0, 2]",
              "Proportional gain k of the law."),
    ParamSpec("chunk_min", 32, "tokens", "[1, 1048576]",
              "Smallest prefill chunk a mixed step may get."),
    ParamSpec("chunk_max", 2048, "tokens", "[chunk_min, 1048576]",
              "Largest prefill chunk a mixed step may get."),
    ParamSpec("chunk_init", 256, "tokens", "[chunk_min, chunk_max]",
              "Chunk before the first guarded cycle."),
    ParamSpec("anti_windup", False, "-", "true or false",
              "Grow the chunk only after a step whose prefill filled its cap (off: the paper's law)."),
    ParamSpec("signal", "schedule", "-", " or ".join(SIGNALS),
              "Interval fed to the law: scheduler-call interval (paper) or completion cadence."),
    ParamSpec("target", "slo", "-", " or ".join(TARGETS),
              "T* from the SLO (paper) or target_decode_steps x the measured decode-only step."),
    ParamSpec("target_decode_steps", 4.0, "steps", "(1, 1000]",
              "With target: decode, T* in decode-only steps (measured online, completion cadence)."),
    ParamSpec("pressure_decodes", 1, "requests", "[1, 1048576]",
              "Act only when at least this many requests are decoding (1: whenever prefill meets a decode)."),
    ParamSpec("prefill_every", 1, "steps", "[1, 1024]",
              "Prefill cadence: with decodes running, admit prefill only on every N-th step (1: every step). "
              "Independent of enabled: with control off, a cadence baseline with stock's chunks."),
    ParamSpec("prefill_interval", 1, "steps", "[1, 1024]",
              "vLLM's prefill schedule interval on one engine (PR 44558's mechanism, PR 54627's single-engine "
              "clock): with decodes running, prefill waits until N-1 steps without prefill have passed since "
              "the last step that carried some, unless vLLM's saturation guard finds that step could not drain "
              "the waiting queue (1: off). Not with prefill_every."),
    ParamSpec("ttft_slo_ms", 1000.0, "ms", "(0, 3600000]",
              "Time-to-first-token SLO: a prompt's first token is due this long after the scheduler first sees "
              "it (read by controllers that plan to prompts' deadlines, deadline), and the saturation guard's "
              "wait."),
    ParamSpec("saturation_guard", True, "-", "true or false",
              "Once the oldest prompt still to prefill has waited ttft_slo_ms, run the step unrestricted, whatever "
              "the controller decided, so no controller starves prefill (off: the paper's law as published, "
              "which the artifact's paired trials reproduce)."),
    ParamSpec("step_log", None, "path", "null or a file path",
              "JSON-lines file for per-step records (appended; null: no records)."),
)

_MAX_TOKENS = 1 << 20
_MAX_EVERY = 1024
"""Longest prefill cadence: a bound against typos; a baseline sweeps 2-8, and at 1024 a prompt behind
running decodes already waits a thousand decode steps per chunk."""


@dataclass(frozen=True, slots=True)
class DLFPParams:
    """Validated DLFP parameters; construct with :func:`parse_params` or keyword arguments."""

    enabled: bool = True
    controller: str = "law"
    itl_slo_ms: float = 100.0
    target_fraction: float = 0.5
    gain: float = 0.5
    chunk_min: int = 32
    chunk_max: int = 2048
    chunk_init: int = 256
    anti_windup: bool = False
    signal: str = "schedule"
    target: str = "slo"
    target_decode_steps: float = 4.0
    pressure_decodes: int = 1
    prefill_every: int = 1
    prefill_interval: int = 1
    ttft_slo_ms: float = 1000.0
    saturation_guard: bool = True
    step_log: str | None = None

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


def _fail(name: str, value: Any, allowed: str) -> DLFPConfigError:
    return DLFPConfigError(f"dlfp parameter {name!r} = {value!r} is invalid: allowed {allowed}")


def _allowed(name: str) -> str:
    return next(s.allowed for s in SPECS if s.name == name)


def _check_number(p: DLFPParams, name: str, kind: type, lo: float, hi: float, lo_open: bool) -> None:
    value = getattr(p, name)
    ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok_type = ok_type and float(value).is_integer()
    if not ok_type or not ((lo < value) if lo_open else (lo <= value)) or not value <= hi:
        raise _fail(name, value, _allowed(name))


def _validate(p: DLFPParams) -> None:
    if not isinstance(p.enabled, bool):
        raise _fail("enabled", p.enabled, _allowed("enabled"))
    if not isinstance(p.controller, str) or p.controller not in REGISTRY:  # read now: a later entry counts
        raise _fail("controller", p.controller, _allowed("controller"))
    _check_number(p, "itl_slo_ms", float, 0, 60000, lo_open=True)
    _check_number(p, "target_fraction", float, 0, 1, lo_open=True)
    _check_number(p, "gain", float, 0, 2, lo_open=True)
    _check_number(p, "chunk_min", int, 1, _MAX_TOKENS, lo_open=False)
    _check_number(p, "chunk_max", int, p.chunk_min, _MAX_TOKENS, lo_open=False)
    _check_number(p, "chunk_init", int, p.chunk_min, p.chunk_max, lo_open=False)
    if not isinstance(p.anti_windup, bool):
        raise _fail("anti_windup", p.anti_windup, _allowed("anti_windup"))
    if p.signal not in SIGNALS:
        raise _fail("signal", p.signal, _allowed("signal"))
    if p.target not in TARGETS:
        raise _fail("target", p.target, _allowed("target"))
    _check_number(p, "target_decode_steps", float, 1, 1000, lo_open=True)
    _check_number(p, "pressure_decodes", int, 1, _MAX_TOKENS, lo_open=False)
    _check_number(p, "prefill_every", int, 1, _MAX_EVERY, lo_open=False)
    _check_number(p, "prefill_interval", int, 1, _MAX_EVERY, lo_open=False)
    if p.prefill_every > 1 and p.prefill_interval > 1:
        raise DLFPConfigError(f"dlfp parameters 'prefill_every' = {p.prefill_every} and 'prefill_interval' = "
                              f"{p.prefill_interval} are two cadences: set at most one above 1")
    _check_number(p, "ttft_slo_ms", float, 0, 3_600_000, lo_open=True)
    if not isinstance(p.saturation_guard, bool):
        raise _fail("saturation_guard", p.saturation_guard, _allowed("saturation_guard"))
    if p.step_log is not None and not (isinstance(p.step_log, str) and p.step_log):
        raise _fail("step_log", p.step_log, _allowed("step_log"))


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
