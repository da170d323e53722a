"""The modeled executor's settings, read from vLLM's ``additional_config["dlfp_sim"]``.

Pure validation, kept apart from the vLLM glue so a typo fails in milliseconds with the
offending key named, before an engine allocates anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from dlfp.control.fields import choice, name, number, refuse_invalid, switch, word
from dlfp.control.fields import markdown_table as fields_table

CONFIG_KEY = "dlfp_sim"
DTYPE_BYTES = (1, 2, 4)
DEFAULT_ENGINE = "gpu-node"
"""The shipped engine-core cost profile (``profiles/engine/gpu-node.yaml``)."""
CLOCKS = ("real", "virtual")
"""``real``: the modeled executor sleeps each step inside a real engine (:mod:`dlfp.sim.executor`);
``virtual``: a discrete-event driver runs vLLM's engine core and scheduler on a virtual clock, no
engine process, no sleeping (:mod:`dlfp.sim.virtual`)."""


class SimConfigError(ValueError):
    """A ``dlfp_sim`` setting is unknown, of the wrong type or out of range."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Modeled-accelerator settings, each declared once with its unit, allowed values and meaning
    (:mod:`dlfp.control.fields`): the check, its message and the reference page's table
    (:func:`markdown_table`) come from the declarations. A run recorded before ``clock`` existed ran in
    real time, which stays the default."""

    profile: str = name("a100", "The cost profile: a shipped name (dlfp/sim/profiles/) or a YAML path: device "
                                "numbers, or a profile fitted by dlfp calibrate / dlfp sim gpu-calibrate.")
    async_scheduling: bool = switch(True, "The engine's async scheduling (GPU vLLM's default, on here too).")
    tp: int = number(1, "GPUs", 1, 64, "Modeled tensor-parallel size (the engine itself stays one process).")
    dtype_bytes: int = choice(2, DTYPE_BYTES, "bytes", "Bytes per weight, KV and activation value (2 for bf16).")
    clock: str = word("real", CLOCKS, "real: a started engine sleeps each modeled step; virtual: a discrete-event "
                                      "clock drives vLLM's engine core in process, nothing sleeps (Virtual time, "
                                      "below).")
    engine: str = name(DEFAULT_ENGINE, "What the engine core's host work costs in virtual time: a shipped "
                                       "engine-core cost profile (dlfp/sim/profiles/engine/) or a YAML path; "
                                       "another than the default only with clock: virtual.")

    def __post_init__(self) -> None:
        refuse_invalid(self, _fail)
        if self.engine != DEFAULT_ENGINE and not self.virtual:
            raise _fail("engine", self.engine, f"{DEFAULT_ENGINE!r} (unset) with clock 'real', which runs the engine "
                        "core for real: an engine-core profile prices it in virtual time only")

    @property
    def virtual(self) -> bool:
        """Does this run on the virtual clock (:mod:`dlfp.sim.virtual`)?"""
        return self.clock == "virtual"


def _fail(key: str, value: Any, allowed: str) -> SimConfigError:
    return SimConfigError(f"{CONFIG_KEY} setting {key!r} = {value!r} is invalid: allowed {allowed}")


def parse_sim_config(additional_config: Any) -> SimConfig:
    """Settings from vLLM's ``additional_config`` (a dict, or None); unknown keys are refused."""
    extra = additional_config if isinstance(additional_config, Mapping) else {}
    raw = extra.get(CONFIG_KEY)
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise SimConfigError(f"{CONFIG_KEY} must be a mapping, got {raw!r}")
    known = {f.name for f in fields(SimConfig)}
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise SimConfigError(f"unknown {CONFIG_KEY} setting(s) {unknown}; known: {sorted(known)}")
    return SimConfig(**raw)


def markdown_table() -> str:
    """The settings as the reference page's Markdown table (``book/reference/modeled.md`` holds exactly this
    text between its markers; a test compares the two)."""
    return fields_table(SimConfig, "key")
