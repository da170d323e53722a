"""Paired-trial configuration: parsed and validated completely before any engine starts.

A config (YAML) names the engine, the DLFP parameters, the workload (its seed is the trial's),
the number of paired trials, the SLOs, the arms and the design. Every arm of a trial replays the
same seeded workload on a fresh engine; arms differ only in their scheduler settings:

* ``arms`` lists them (default: ``stock`` and ``dlfp``). An arm is ``{name, dlfp, engine}``:
  ``dlfp`` absent or null runs stock vLLM scheduling through the same instrumented scheduler
  (DLFP ``enabled: false``), a mapping runs DLFP with those parameters over the config's common
  ``dlfp`` ones; ``engine`` overrides scheduler settings of the engine
  (``max_num_batched_tokens``, ``long_prefill_token_threshold``, ``max_num_seqs``), which is how
  vLLM's own knobs become baselines. An arm named ``stock`` with neither is required: it is the
  reference every reduction is computed against.
* ``design`` says where load, targets and SLOs come from (:mod:`dlfp.trials.design`): ``scaled``
  (default) derives them from a pre-flight measurement of the engine, ``fixed`` takes the
  config's values as written (the paper's style).
* ``workload`` is :meth:`dlfp.harness.workload.WorkloadSpec.from_dict`'s mapping, validated whole
  here: optional ``arrival`` (Poisson, or ``{kind: gamma, burstiness: b}``), and per class lengths
  that are fixed, uniform or clipped lognormal (:mod:`dlfp.harness.lengths`), each class within
  the model length.

The CPU defaults (:data:`CPU_DEFAULT`) are the paper's mix on the tiny weightless Qwen3: short
interactive requests, long prompts arriving while they decode; the scaled design sets the rate
and long-prompt share for the machine it runs on. The long prompts are 512-768 tokens rather than
the GPU configs' 1.5-2k: on a CPU a prefill token costs far more relative to a decode step than
on a GPU, and with 2k-token prompts stock's stalls could only reach a pooled P99 at a load that
DLFP's chunking (each chunk carries a decode step) pushes past the engine's capacity, on one
core more so than on two (the design refuses such a workload and says why).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from dlfp.control.params import DLFPConfigError, parse_params
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import PAPER_MIX_CLASSES, WorkloadSpec
from dlfp.paths import model_path
from dlfp.trials.design import DERIVED, DesignSpec

DTYPES = ("float32", "bfloat16", "float16", "auto")
"""Model precisions vLLM 0.32 takes for these models (``auto``: the checkpoint's own)."""
REFERENCE = "stock"
"""The arm every reduction is computed against: stock vLLM scheduling, no engine override."""
ARM_ENGINE_KEYS = ("max_num_batched_tokens", "long_prefill_token_threshold", "max_num_seqs")
DEFAULT_ARMS: list[dict[str, Any]] = [{"name": "stock"}, {"name": "dlfp", "dlfp": {}}]

CPU_DEFAULT: dict[str, Any] = {
    "name": "cpu-default",
    "trials": 3,
    "seeds": None,
    "engine": {"model": "qwen3-tiny", "dtype": "float32", "max_model_len": 4096,
               "max_num_batched_tokens": 4096, "max_num_seqs": 64, "kv_cache_gib": 2},
    "dlfp": {},
    "arms": DEFAULT_ARMS,
    "design": {"kind": "scaled"},
    "workload": {
        "n_requests": 100, "rate_rps": 4.0, "vocab_size": 32000, "max_model_len": 4096,
        "classes": [
            {**PAPER_MIX_CLASSES[0], "weight": 0.75, "output_len": {"uniform": [32, 96]}},
            {**PAPER_MIX_CLASSES[1], "weight": 0.25, "prompt_len": {"uniform": [512, 768]}},
        ],
    },
    "slo": {"ttft_ms": 5000.0, "tpot_ms": 100.0},
    "telemetry_interval_s": 0.5,
}


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its name, DLFP parameters (``None``: stock scheduling) and engine overrides."""

    name: str
    dlfp: dict[str, Any] | None
    engine: dict[str, Any]

    @property
    def label(self) -> str:
        """What the arm is, in words, for tables: its DLFP parameters and engine overrides."""
        parts = [f"{k}={v}" for k, v in sorted(self.engine.items())]
        if self.dlfp is not None:
            parts.insert(0, "DLFP" + (f"({', '.join(f'{k}={v}' for k, v in sorted(self.dlfp.items()))})"
                                      if self.dlfp else ""))
        return ", ".join(parts) or "stock vLLM"


@dataclass(frozen=True)
class TrialConfig:
    """A validated paired-trial configuration."""

    name: str
    seeds: tuple[int, ...]
    engine: EngineSpec
    dlfp: dict[str, Any]
    arms: tuple[ArmSpec, ...]
    design: DesignSpec
    workload: dict[str, Any]
    ttft_slo_s: float
    tpot_slo_s: float
    telemetry_interval_s: float
    raw: dict[str, Any]

    def workload_spec(self, seed: int) -> WorkloadSpec:
        return WorkloadSpec.from_dict({**self.workload, "seed": seed})

    @property
    def arm_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms)

    def arm(self, name: str) -> ArmSpec:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(f"config {self.name!r} has no arm {name!r}; arms: {list(self.arm_names)}")

    def engine_for(self, arm: str) -> EngineSpec:
        """The engine of one arm: its engine overrides, and DLFP on with its parameters or off.

        An arm without ``dlfp`` is stock (control off); one with a mapping has control on unless
        the mapping says ``enabled: false``: then its other parameters still apply with control
        off, which is how a prefill-cadence baseline (``prefill_every``) keeps stock's chunks."""
        a = self.arm(arm)
        enabled = False if a.dlfp is None else a.dlfp.get("enabled", True)
        params = {**self.dlfp, **(a.dlfp or {}), "enabled": enabled}
        return EngineSpec(**{**arm_engine(self.engine.__dict__, a.engine), "dlfp": params})

    def arm_label(self, arm: str) -> str:
        """:attr:`ArmSpec.label`, plus the ``max_num_seqs`` the arm ran with when :func:`arm_engine`
        lowered it (so a table never hides a setting that differs from stock's)."""
        label, seqs = self.arm(arm).label, self.engine_for(arm).max_num_seqs
        return label if seqs == self.engine.max_num_seqs else f"{label}, max_num_seqs={seqs} (lowered to the budget)"

    def with_overrides(self, overrides: Mapping[str, Any]) -> TrialConfig:
        """This config with a design's overrides merged in (validated again)."""
        return parse_config(merge(self.raw, overrides))


def _fail(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"config field {field!r} = {value!r} is invalid: allowed {allowed}")


def _number(raw: Mapping[str, Any], key: str, where: str, lo: float, hi: float) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise _fail(f"{where}.{key}" if where else key, value, f"a number in ({lo}, {hi}]")
    return float(value)


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


def _finite(value: Any) -> bool:
    """Does ``value`` hold only finite numbers? NaN breaks the manifest's round trip (NaN != NaN),
    and neither NaN nor infinity is JSON."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def _engine(raw: Any) -> EngineSpec:
    if not isinstance(raw, Mapping):
        raise _fail("engine", raw, "a mapping of engine settings")
    known = {f.name for f in fields(EngineSpec)} - {"dlfp"}
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise ValueError(f"unknown engine setting(s) {unknown}; known: {sorted(known)}")
    defaults = EngineSpec()
    if "dtype" in raw and raw["dtype"] not in DTYPES:
        raise _fail("engine.dtype", raw["dtype"], f"one of {list(DTYPES)}")
    for key, value in raw.items():
        if key == "sim":
            if value is not None and not isinstance(value, Mapping):
                raise _fail("engine.sim", value, "null or a mapping of modeled-accelerator settings")
            continue
        if value is None and getattr(defaults, key) is None:
            continue  # a setting that defaults to null (engine.async_scheduling, engine.tokenizer ...)
        want = EngineSpec.setting_type(key)
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        lowest = 0 if key in ("seed", "long_prefill_token_threshold") else 1
        if want is int and ok and value < lowest:
            ok = False
        if not ok:
            raise _fail(f"engine.{key}", value, f"a {want.__name__}" + (f" >= {lowest}" if want is int else ""))
        if key == "extra":  # vLLM keyword arguments, recorded in the manifest's JSON
            if not all(isinstance(k, str) and k.isidentifier() for k in value):
                raise _fail("engine.extra", value, "a mapping of vLLM engine argument names (identifiers) to values")
            if not _finite(value):
                raise _fail("engine.extra", value, "values without NaN or infinity (the manifest must read back "
                                                   "the same run)")
    if "model" in raw:
        try:
            model_path(raw["model"], raw.get("download_dir"))
        except (ValueError, OSError) as exc:  # OSError: a name too long for a path
            raise _fail("engine.model", raw["model"], str(exc).split(": ", 1)[-1]) from None
    spec = EngineSpec(**raw)
    if spec.max_num_seqs > spec.max_num_batched_tokens:  # vLLM's SchedulerConfig refuses it at engine start
        raise _fail("engine.max_num_seqs", spec.max_num_seqs,
                    f"at most max_num_batched_tokens ({spec.max_num_batched_tokens})")
    if spec.sim is not None:
        from dlfp.sim.config import CONFIG_KEY, SimConfigError, parse_sim_config

        try:
            parse_sim_config({CONFIG_KEY: spec.sim})
        except SimConfigError as exc:
            raise ValueError(f"config field 'engine.sim': {exc}") from None
    return spec


def parse_config(raw: Mapping[str, Any]) -> TrialConfig:
    """Merge ``raw`` over the CPU defaults and validate every field."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"a trial config must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(CPU_DEFAULT), key=str)
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown}; known: {sorted(CPU_DEFAULT)}")
    merged = copy.deepcopy(CPU_DEFAULT)
    for key, value in raw.items():
        if isinstance(value, Mapping) and key in ("engine", "slo", "workload", "design"):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    trials = merged["trials"]
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= 1000:
        raise _fail("trials", trials, "an integer in [1, 1000]")
    seeds = merged["seeds"]
    if seeds is None:
        seeds = list(range(trials))
    if (not isinstance(seeds, list) or len(seeds) != trials
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != trials):
        raise _fail("seeds", seeds, f"null or a list of trials = {trials} distinct integers >= 0")
    for key in ("dlfp", "workload", "slo"):
        if not isinstance(merged[key], Mapping):
            raise _fail(key, merged[key], "a mapping")
    engine = _engine(merged["engine"])
    try:
        parse_params(merged["dlfp"])
    except DLFPConfigError as exc:
        raise ValueError(f"config field 'dlfp': {exc}") from None
    if "enabled" in merged["dlfp"]:
        raise _fail("dlfp.enabled", merged["dlfp"]["enabled"], "unset: the runner sets it per arm")
    if "step_log" in merged["dlfp"]:
        raise _fail("dlfp.step_log", merged["dlfp"]["step_log"], "unset: the runner sets it per arm")
    arms = _arms(merged["arms"], engine)
    try:
        design = DesignSpec.parse(merged["design"])
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    workload = dict(merged["workload"])
    if "seed" in workload:
        raise _fail("workload.seed", workload["seed"], "unset: trial seeds come from 'seeds'")
    spec = WorkloadSpec.from_dict({**workload, "seed": 0})  # validates every workload field
    limit, field = min((engine.max_model_len, "engine.max_model_len"),
                       (spec.max_model_len or engine.max_model_len, "workload.max_model_len"))
    for i, c in enumerate(spec.classes):  # refused only after the pre-flight otherwise (vLLM, or the workload's draw)
        need = c.prompt_len.hi + c.output_len.hi
        if need > limit:
            raise _fail(field, limit, f">= {need}: workload.classes[{i}] ({c.name!r}) can ask prompt_len + "
                        f"output_len = {c.prompt_len.hi} + {c.output_len.hi} = {need} tokens (its largest lengths), "
                        f"more than {field} = {limit}")
    slo = merged["slo"]
    unknown = sorted(set(slo) - {"ttft_ms", "tpot_ms"}, key=str)
    if unknown:
        raise ValueError(f"unknown slo field(s) {unknown}; known: ['tpot_ms', 'ttft_ms']")
    name = merged["name"]
    if not isinstance(name, str) or not name:
        raise _fail("name", name, "a non-empty string")
    return TrialConfig(
        name=name, seeds=tuple(seeds), engine=engine, dlfp=dict(merged["dlfp"]), arms=arms, design=design,
        workload=workload,
        ttft_slo_s=_number(slo, "ttft_ms", "slo", 0, 3.6e6) / 1000.0,
        tpot_slo_s=_number(slo, "tpot_ms", "slo", 0, 3.6e6) / 1000.0,
        telemetry_interval_s=_number(merged, "telemetry_interval_s", "", 0, 60),
        raw=merged,
    )


_ARM_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")


def _arms(raw: Any, engine: EngineSpec) -> tuple[ArmSpec, ...]:
    """Validate the ``arms`` list: unique folder-safe names, a plain ``stock`` reference."""
    if not isinstance(raw, list) or not raw:
        raise _fail("arms", raw, "a non-empty list of {name, dlfp, engine} mappings")
    arms = []
    for i, entry in enumerate(raw):
        where = f"arms[{i}]"
        if not isinstance(entry, Mapping):
            raise _fail(where, entry, "a mapping {name, dlfp, engine}")
        unknown = sorted(set(entry) - {"name", "dlfp", "engine"}, key=str)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} in config field {where!r}; known: ['dlfp', 'engine', 'name']")
        name = entry.get("name")
        if not isinstance(name, str) or not _ARM_NAME.match(name):
            raise _fail(f"{where}.name", name, "lower-case letters, digits, '-', '_' or '.', at most 40")
        dlfp = entry.get("dlfp")
        if dlfp is not None:
            if not isinstance(dlfp, Mapping):
                raise _fail(f"{where}.dlfp", dlfp, "null (stock scheduling) or a mapping of DLFP parameters")
            # enabled: false is an arm's own choice (a cadence baseline, control off); the rest is the runner's
            bad = sorted(k for k in set(dlfp) & {"enabled", "step_log"} if not (k == "enabled" and dlfp[k] is False))
            if bad:
                raise _fail(f"{where}.dlfp.{bad[0]}", dlfp[bad[0]], "unset (enabled: false only): the runner sets it "
                            "per arm")
            try:
                parse_params(_placeholders(dlfp, DERIVED_DLFP_KEYS, f"{where}.dlfp"))
            except DLFPConfigError as exc:
                raise ValueError(f"config field '{where}.dlfp': {exc}") from None
        overrides = entry.get("engine") or {}
        if not isinstance(overrides, Mapping) or set(overrides) - set(ARM_ENGINE_KEYS):
            raise _fail(f"{where}.engine", overrides, f"a mapping with keys among {list(ARM_ENGINE_KEYS)}")
        _engine({**arm_engine({k: v for k, v in engine.__dict__.items() if k not in ("dlfp", "sim", "extra")},
                              _placeholders(overrides, DERIVED_ENGINE_KEYS, f"{where}.engine")),
                 **({"sim": engine.sim} if engine.sim is not None else {})})
        arms.append(ArmSpec(name, None if dlfp is None else dict(dlfp), dict(overrides)))
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise _fail("arms", names, "unique arm names")
    ref = next((a for a in arms if a.name == REFERENCE), None)
    if ref is None or ref.dlfp is not None or ref.engine:
        raise _fail("arms", names, f"a plain {REFERENCE!r} arm (no dlfp, no engine overrides): the reference")
    return tuple(arms)


DERIVED_DLFP_KEYS = ("chunk_min", "chunk_max", "chunk_init")
DERIVED_ENGINE_KEYS = ("max_num_batched_tokens", "long_prefill_token_threshold")


def _placeholders(values: Mapping[str, Any], keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """``values`` with each derived name (:data:`dlfp.trials.design.DERIVED`, allowed only under ``keys``)
    replaced by a typical number, so the rest validates now; the design resolves it before any arm."""
    out = dict(values)
    for key, value in values.items():
        if isinstance(value, str) and value.startswith("@"):
            if value not in DERIVED or key not in keys:
                raise _fail(f"{where}.{key}", value, f"a number, or one of {sorted(DERIVED)} for {list(keys)}")
            out[key] = 256
    return out


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a deep copy of ``base``: mappings key by key, anything else replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def run_config(manifest: Mapping[str, Any]) -> TrialConfig:
    """The config a run really ran: its requested config with its design's overrides merged in.

    Runs made before designs existed have no ``design`` record: their config ran as written.
    """
    raw = dict(manifest["config"])
    if "design" not in manifest:
        raw.setdefault("design", {"kind": "fixed"})
    return parse_config(merge(raw, (manifest.get("design") or {}).get("overrides") or {}))


def read_yaml(path: str) -> dict[str, Any]:
    """A YAML config file's mapping (empty file: ``{}``), refusing unreadable or non-YAML files by name."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"config file {path}: cannot read it as YAML ({' '.join(str(exc).split())})") from None
    if raw is not None and not isinstance(raw, Mapping):
        raise ValueError(f"config file {path}: expected a mapping of config fields, got {type(raw).__name__}")
    return dict(raw or {})


def load_config(path: str) -> TrialConfig:
    """Read a YAML config file; an empty file means the CPU defaults."""
    return parse_config(read_yaml(path))

