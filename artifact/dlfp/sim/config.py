"""The modeled executor's settings, read from vLLM's ``additional_config["dlfp_sim"]``.

Pure validation, kept apart from the vLLM glue so a typo fails in milliseconds with the
offending key named, before an engine allocates anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

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
    """Modeled-accelerator settings.

    ``profile``: a shipped profile name or a YAML path. ``async_scheduling``: the engine's
    async scheduling (GPU vLLM's default, on here too). ``tp``: modeled tensor-parallel
    size (the engine itself stays one process). ``dtype_bytes``: bytes per weight, KV and
    activation value (2 for bf16). ``clock``: one of :data:`CLOCKS`; a run recorded before the key
    existed ran in real time, which stays the default. ``engine``: the engine-core cost profile virtual
    time charges (a shipped name, :data:`DEFAULT_ENGINE`, or a YAML path); real time runs the engine core
    for real and refuses another.
    """

    profile: str = "a100"
    async_scheduling: bool = True
    tp: int = 1
    dtype_bytes: int = 2
    clock: str = "real"
    engine: str = DEFAULT_ENGINE

    def __post_init__(self) -> None:
        if not isinstance(self.profile, str) or not self.profile:
            raise _fail("profile", self.profile, "a profile name or a YAML path")
        if not isinstance(self.async_scheduling, bool):
            raise _fail("async_scheduling", self.async_scheduling, "true or false")
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise _fail("tp", self.tp, "a positive integer")
        if isinstance(self.dtype_bytes, bool) or self.dtype_bytes not in DTYPE_BYTES:
            raise _fail("dtype_bytes", self.dtype_bytes, f"one of {list(DTYPE_BYTES)}")
        if self.clock not in CLOCKS:
            raise _fail("clock", self.clock, " or ".join(CLOCKS))
        if not isinstance(self.engine, str) or not self.engine:
            raise _fail("engine", self.engine, "an engine-core profile name or a YAML path")
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
