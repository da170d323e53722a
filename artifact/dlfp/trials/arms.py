"""A trial config's arms: what each may set, validated before any engine starts.

An arm is a name with DLFP parameters (absent: stock scheduling through the same instrumented
scheduler), engine overrides, and where it sits on a rate sweep (its own ``load``, which a capacity
design turns into ``rate_rps`` and ``n_requests``). Values a design derives from the pre-flight
(:data:`dlfp.trials.design.DERIVED`) may stand in for numbers under the keys that take them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dlfp.control.fields import mapping, number, pattern, refuse_invalid
from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.fields import rule as fields_rule
from dlfp.control.params import DLFPConfigError, parse_params
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import MAX_REQUESTS
from dlfp.trials.design import DERIVED

REFERENCE = "stock"
"""The arm every reduction is computed against: stock vLLM scheduling, no engine override."""
ARM_ENGINE_KEYS = ("max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs")


def config_error(field: str, value: Any, allowed: str) -> ValueError:
    """The error of one invalid config field, naming its value and what is allowed."""
    return ValueError(f"config field {field!r} = {value!r} is invalid: allowed {allowed}")


def _refused_in(where: str) -> Callable[[str, Any, str], ValueError]:
    """:func:`config_error` for a field of the mapping at ``where`` (``arms[2]``)."""
    return lambda key, value, allowed: config_error(f"{where}.{key}", value, allowed)


ARM_NAME = r"[a-z0-9][a-z0-9_.-]{0,39}"
"""An arm's name: it names a folder in every trial."""


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its name, DLFP parameters (``None``: stock scheduling) and engine overrides, each setting
    declared once with its allowed values and meaning (:mod:`dlfp.control.fields`): :func:`parse_arms` checks a
    config's arms by these declarations, and the trial reference page's table of arm keys is generated from
    them (:func:`markdown_table`)."""

    name: str = pattern(REFERENCE, ARM_NAME, "lower-case letters, digits, '-', '_' or '.', at most 40",
                        "The arm's name: its folder in every trial and its label in every table.")
    dlfp: dict[str, Any] | None = mapping("The arm's DLFP parameters (numbers may be derived values such as "
                                          "@target_chunk); null: stock scheduling.", nullable=True)
    engine: dict[str, Any] = mapping("Engine overrides among max_num_batched_tokens, long_prefill_token_threshold "
                                     "and max_num_seqs (@sarathi_budget for a budget).")
    load: float | None = number(None, "share", 0, 10, "Capacity designs: the load this arm runs at (null: the "
                                "design's load).", lo_open=True, nullable=True)
    rate_rps: float | None = number(None, "req/s", 0, 1e6, "The arrival rate this arm replays its trial's workload "
                                    "at (null: the workload's); a capacity design sets it from load.", lo_open=True,
                                    nullable=True)
    n_requests: int | None = number(None, "requests", 1, MAX_REQUESTS, "How many of its trial's requests (the first) "
                                    "this arm replays, at most workload.n_requests (null: all); a capacity design "
                                    "sets it from load.", nullable=True, integer=True)
    trials: int | None = number(None, "trials", 1, 1000, "How many of the run's trials this arm runs in, the "
                                "first ones, at most the config's trials (null: every one): a study runs more "
                                "trials only for the arms a close comparison reads.", nullable=True, integer=True)

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
        if "name" not in entry:  # no default here: an arm is named by its config
            raise config_error(f"{where}.name", None, fields_rule(ArmSpec, "name").allowed)
        # engine: null means no override, as an absent key does; the rest is checked by the declarations
        given = ArmSpec(**{k: entry[k] for k in ARM_KEYS if k in entry and not (k == "engine" and entry[k] is None)})
        refuse_invalid(given, _refused_in(where))
        dlfp = given.dlfp
        if dlfp is not None:
            # enabled: false is an arm's own choice (a cadence baseline, control off); the rest is the runner's
            bad = sorted(k for k in set(dlfp) & {"enabled", "step_log"} if not (k == "enabled" and dlfp[k] is False))
            if bad:
                raise config_error(f"{where}.dlfp.{bad[0]}", dlfp[bad[0]],
                                   "unset (enabled: false only): the runner sets it per arm")
            try:
                parse_params(_placeholders(dlfp, DERIVED_DLFP_KEYS, f"{where}.dlfp"))
            except DLFPConfigError as exc:
                raise ValueError(f"config field '{where}.dlfp': {exc}") from None
        overrides = given.engine
        if set(overrides) - set(ARM_ENGINE_KEYS):
            raise config_error(f"{where}.engine", overrides, f"a mapping with keys among {list(ARM_ENGINE_KEYS)}")
        check_engine({**arm_engine({k: v for k, v in engine.__dict__.items() if k not in ("dlfp", "sim", "extra")},
                              _placeholders(overrides, DERIVED_ENGINE_KEYS, f"{where}.engine")),
                 **({"sim": engine.sim} if engine.sim is not None else {})})
        arms.append(ArmSpec(given.name, None if dlfp is None else dict(dlfp), dict(overrides),
                            None if given.load is None else float(given.load),
                            None if given.rate_rps is None else float(given.rate_rps), given.n_requests, given.trials))
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


def markdown_table() -> str:
    """An arm's keys as the trial reference's Markdown table (``book/reference/trials.md`` holds it)."""
    return fields_table(ArmSpec, "key")
