"""A trial config's arms: what each may set, validated before any engine starts.

An arm is a name with DLFP parameters (absent: stock scheduling through the same instrumented
scheduler), engine overrides, and where it sits on a rate sweep (its own ``load``, which a capacity
design turns into ``rate_rps`` and ``n_requests``). Values a design derives from the pre-flight
(:data:`dlfp.trials.design.DERIVED`) may stand in for numbers under the keys that take them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dlfp.control.params import DLFPConfigError, parse_params
from dlfp.harness.engine import EngineSpec
from dlfp.trials.design import DERIVED

REFERENCE = "stock"
"""The arm every reduction is computed against: stock vLLM scheduling, no engine override."""
ARM_ENGINE_KEYS = ("max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs")


def config_error(field: str, value: Any, allowed: str) -> ValueError:
    """The error of one invalid config field, naming its value and what is allowed."""
    return ValueError(f"config field {field!r} = {value!r} is invalid: allowed {allowed}")


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its name, DLFP parameters (``None``: stock scheduling) and engine overrides."""

    name: str
    dlfp: dict[str, Any] | None
    engine: dict[str, Any]
    load: float | None = None
    """Capacity designs: the load this arm runs at (None: the design's ``load``)."""
    rate_rps: float | None = None
    """The arrival rate this arm replays its trial's workload at (None: the workload's); a capacity
    design sets it from ``load``."""
    n_requests: int | None = None
    """How many of its trial's requests (the first) this arm replays (None: all); a capacity design
    sets it from ``load``."""
    trials: int | None = None
    """How many of the run's trials this arm runs in, the first ones (None: every one). A study runs more
    trials only for the arms a close comparison reads (:func:`dlfp.studies.plans.capacity`'s goal arms), so
    those comparisons get the power without every other arm paying for it."""

    @property
    def label(self) -> str:
        """What the arm is, in words, for tables: its DLFP parameters and engine overrides."""
        parts = [f"{k}={v}" for k, v in sorted(self.engine.items())]
        if self.dlfp is not None:
            parts.insert(0, "DLFP" + (f"({', '.join(f'{k}={v}' for k, v in sorted(self.dlfp.items()))})"
                                      if self.dlfp else ""))
        return ", ".join(parts) or "stock vLLM"


def arm_engine(engine: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """An arm's engine settings: the config's, then the arm's overrides.

    An arm that lowers the token budget below the config's ``max_num_seqs`` without setting
    ``max_num_seqs`` itself runs with it lowered to the budget. vLLM refuses a budget below
    ``max_num_seqs``, and a step cannot schedule more requests than it has tokens, so the lower
    bound only limits how many requests may be running at once beyond that number. A
    Sarathi-style budget of a few hundred tokens on a large model needs this.
    """
    out = {**engine, **overrides}
    budget, seqs = out.get("max_num_batched_tokens"), out.get("max_num_seqs")
    if "max_num_seqs" not in overrides and isinstance(budget, int) and isinstance(seqs, int) and budget < seqs:
        out["max_num_seqs"] = budget
    return out


_ARM_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")


def parse_arms(raw: Any, engine: EngineSpec, check_engine: Callable[[Any], EngineSpec]) -> tuple[ArmSpec, ...]:
    """Validate the ``arms`` list: unique folder-safe names, a plain ``stock`` reference; each arm's
    engine (the config's ``engine`` with its overrides) is validated by ``check_engine``."""
    if not isinstance(raw, list) or not raw:
        raise config_error("arms", raw, "a non-empty list of {name, dlfp, engine} mappings")
    arms = []
    for i, entry in enumerate(raw):
        where = f"arms[{i}]"
        if not isinstance(entry, Mapping):
            raise config_error(where, entry, "a mapping {name, dlfp, engine}")
        unknown = sorted(set(entry) - set(ARM_KEYS), key=str)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} in config field {where!r}; known: {sorted(ARM_KEYS)}")
        for key in ("load", "rate_rps"):
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or not 0 < value <= (10 if key == "load" else 1e6)):
                raise config_error(f"{where}.{key}", value, "null or a number in (0, 10]" if key == "load"
                            else "null or a rate in (0, 1e6] requests/s")
        name = entry.get("name")
        if not isinstance(name, str) or not _ARM_NAME.match(name):
            raise config_error(f"{where}.name", name, "lower-case letters, digits, '-', '_' or '.', at most 40")
        dlfp = entry.get("dlfp")
        if dlfp is not None:
            if not isinstance(dlfp, Mapping):
                raise config_error(f"{where}.dlfp", dlfp, "null (stock scheduling) or a mapping of DLFP parameters")
            # enabled: false is an arm's own choice (a cadence baseline, control off); the rest is the runner's
            bad = sorted(k for k in set(dlfp) & {"enabled", "step_log"} if not (k == "enabled" and dlfp[k] is False))
            if bad:
                raise config_error(f"{where}.dlfp.{bad[0]}", dlfp[bad[0]],
                                   "unset (enabled: false only): the runner sets it per arm")
            try:
                parse_params(_placeholders(dlfp, DERIVED_DLFP_KEYS, f"{where}.dlfp"))
            except DLFPConfigError as exc:
                raise ValueError(f"config field '{where}.dlfp': {exc}") from None
        overrides = entry.get("engine") or {}
        if not isinstance(overrides, Mapping) or set(overrides) - set(ARM_ENGINE_KEYS):
            raise config_error(f"{where}.engine", overrides, f"a mapping with keys among {list(ARM_ENGINE_KEYS)}")
        check_engine({**arm_engine({k: v for k, v in engine.__dict__.items() if k not in ("dlfp", "sim", "extra")},
                              _placeholders(overrides, DERIVED_ENGINE_KEYS, f"{where}.engine")),
                 **({"sim": engine.sim} if engine.sim is not None else {})})
        rate, n = entry.get("rate_rps"), entry.get("n_requests")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise config_error(f"{where}.n_requests", n, "null or an integer >= 1 (at most workload.n_requests)")
        trials = entry.get("trials")
        if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
            raise config_error(f"{where}.trials", trials, "null (every trial) or an integer >= 1 (at most the "
                               "config's trials)")
        arms.append(ArmSpec(name, None if dlfp is None else dict(dlfp), dict(overrides),
                            None if entry.get("load") is None else float(entry["load"]),
                            None if rate is None else float(rate), n, trials))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise config_error("arms", names, "unique arm names")
    ref = next((a for a in arms if a.name == REFERENCE), None)
    if ref is None or ref.dlfp is not None or ref.engine:
        raise config_error("arms", names, f"a plain {REFERENCE!r} arm (no dlfp, no engine overrides): the reference")
    if ref.trials is not None:
        raise config_error(f"arms[{names.index(REFERENCE)}].trials", ref.trials,
                           f"unset: the {REFERENCE!r} reference runs in every trial (the regime check reads it)")
    return tuple(arms)


ARM_KEYS = ("name", "dlfp", "engine", "load", "rate_rps", "n_requests", "trials")
"""What an arm may set: its name, DLFP parameters, engine overrides, where it runs on a rate sweep, and in
how many of the run's trials."""
DERIVED_DLFP_KEYS = ("chunk_min", "chunk_max", "chunk_init", "itl_slo_ms", "ttft_slo_ms")
SLO_PREFIXES = {"itl_slo_ms": "@itl_slo_", "ttft_slo_ms": "@ttft_slo_"}
"""The derived names an SLO key takes (a level's SLO), and only it."""
DERIVED_ENGINE_KEYS = ("max_num_batched_tokens", "long_prefill_token_threshold")


def _slo_prefix(name: str) -> str | None:
    return next((p for p in SLO_PREFIXES.values() if name.startswith(p)), None)


def _placeholders(values: Mapping[str, Any], keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """``values`` with each derived name (:data:`dlfp.trials.design.DERIVED`, allowed only under ``keys``)
    replaced by a typical number, so the rest validates now; the design resolves it before any arm."""
    out = dict(values)
    for key, value in values.items():
        if isinstance(value, str) and value.startswith("@"):
            if value not in DERIVED or key not in keys or _slo_prefix(value) != SLO_PREFIXES.get(key):
                names = sorted(n for n in DERIVED if _slo_prefix(n) == SLO_PREFIXES.get(key))
                raise config_error(f"{where}.{key}", value, f"a number, or one of {names} for {key} (derived names "
                            f"are allowed for {list(keys)})")
            out[key] = 256
    return out
