"""Paired-trial configuration: parsed and validated completely before any engine starts.

A config (YAML) names the engine, the DLFP parameters of the DLFP arm, the workload (its
seed is the trial's), the number of paired trials and the SLOs. The stock arm runs the same
engine with DLFP ``enabled: false`` so the arms differ in one thing only.

CPU defaults (:data:`CPU_DEFAULT`) load a 2-core machine realistically without saturating it.
The tiny Qwen3 decodes a step in 10-20 ms and prefills about 14 tokens/ms, so at 4 requests/s
a few requests are decoding whenever a long prompt arrives, and the queue drains between
bursts instead of growing. The mix is the paper's situation (short interactive requests,
long prompts arriving while they decode) with long prompts 25% of requests and short outputs
of 32-96 tokens: stock vLLM's prefill stalls are then about 2% of all inter-token gaps, so
they, not ordinary decode steps, set its P99 ITL, which is the regime the paper measures.
With rarer stalls (< 1% of gaps) P99 ITL only sees decode steps, and DLFP, which trades one
long stall for several target-length steps, cannot lower it: the book discusses this.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from dlfp.engine import EngineSpec
from dlfp.models import model_path
from dlfp.params import DLFPConfigError, parse_params
from dlfp.workload import PAPER_MIX_CLASSES, WorkloadSpec

ARMS = ("stock", "dlfp")

CPU_DEFAULT: dict[str, Any] = {
    "name": "cpu-default",
    "trials": 3,
    "seeds": None,
    "engine": {"model": "qwen3-tiny", "dtype": "float32", "max_model_len": 4096,
               "max_num_batched_tokens": 4096, "max_num_seqs": 64, "kv_cache_gib": 2},
    "dlfp": {},
    "workload": {
        "n_requests": 100, "rate_rps": 4.0, "vocab_size": 32000, "max_model_len": 4096,
        "classes": [
            {**PAPER_MIX_CLASSES[0], "weight": 0.75, "output_len": {"uniform": [32, 96]}},
            {**PAPER_MIX_CLASSES[1], "weight": 0.25},
        ],
    },
    "slo": {"ttft_ms": 5000.0, "tpot_ms": 100.0},
    "telemetry_interval_s": 0.5,
}


@dataclass(frozen=True)
class TrialConfig:
    """A validated paired-trial configuration."""

    name: str
    seeds: tuple[int, ...]
    engine: EngineSpec
    dlfp: dict[str, Any]
    workload: dict[str, Any]
    ttft_slo_s: float
    tpot_slo_s: float
    telemetry_interval_s: float
    raw: dict[str, Any]

    def workload_spec(self, seed: int) -> WorkloadSpec:
        return WorkloadSpec.from_dict({**self.workload, "seed": seed})

    def engine_for(self, arm: str) -> EngineSpec:
        """The engine of one arm: DLFP on for ``dlfp``, off (stock scheduling) for ``stock``."""
        params = {**self.dlfp, "enabled": arm == "dlfp"}
        return EngineSpec(**{**self.engine.__dict__, "dlfp": params})


def _fail(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"config field {field!r} = {value!r} is invalid: allowed {allowed}")


def _number(raw: Mapping[str, Any], key: str, where: str, lo: float, hi: float) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise _fail(f"{where}.{key}" if where else key, value, f"a number in ({lo}, {hi}]")
    return float(value)


def _engine(raw: Any) -> EngineSpec:
    if not isinstance(raw, Mapping):
        raise _fail("engine", raw, "a mapping of engine settings")
    known = {f.name for f in fields(EngineSpec)} - {"dlfp"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown engine setting(s) {unknown}; known: {sorted(known)}")
    defaults = EngineSpec()
    for key, value in raw.items():
        if key == "sim":
            if value is not None and not isinstance(value, Mapping):
                raise _fail("engine.sim", value, "null or a mapping of modeled-accelerator settings")
            continue
        want = type(getattr(defaults, key))
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if want is int and ok and key != "seed" and value < 1:
            ok = False
        if not ok:
            raise _fail(f"engine.{key}", value, f"a {want.__name__}" + (" >= 1" if want is int else ""))
    if "model" in raw:
        try:
            model_path(raw["model"])
        except ValueError as exc:
            raise _fail("engine.model", raw["model"], str(exc).split(": ", 1)[-1]) from None
    spec = EngineSpec(**raw)
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
    unknown = sorted(set(raw) - set(CPU_DEFAULT))
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown}; known: {sorted(CPU_DEFAULT)}")
    merged = copy.deepcopy(CPU_DEFAULT)
    for key, value in raw.items():
        if isinstance(value, Mapping) and key in ("engine", "slo", "workload"):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    trials = merged["trials"]
    if isinstance(trials, bool) or not isinstance(trials, int) or not 1 <= trials <= 1000:
        raise _fail("trials", trials, "an integer in [1, 1000]")
    seeds = merged["seeds"]
    if seeds is None:
        seeds = list(range(trials))
    if (not isinstance(seeds, list) or len(seeds) != trials or len(set(seeds)) != trials
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise _fail("seeds", seeds, f"null or a list of {trials} distinct integers >= 0")
    engine = _engine(merged["engine"])
    try:
        parse_params(merged["dlfp"])
    except DLFPConfigError as exc:
        raise ValueError(f"config field 'dlfp': {exc}") from None
    if "enabled" in merged["dlfp"]:
        raise _fail("dlfp.enabled", merged["dlfp"]["enabled"], "unset: the runner sets it per arm")
    if "step_log" in merged["dlfp"]:
        raise _fail("dlfp.step_log", merged["dlfp"]["step_log"], "unset: the runner sets it per arm")
    workload = dict(merged["workload"])
    if "seed" in workload:
        raise _fail("workload.seed", workload["seed"], "unset: trial seeds come from 'seeds'")
    WorkloadSpec.from_dict({**workload, "seed": 0})  # validates every workload field
    slo = merged["slo"]
    unknown = sorted(set(slo) - {"ttft_ms", "tpot_ms"})
    if unknown:
        raise ValueError(f"unknown slo field(s) {unknown}; known: ['tpot_ms', 'ttft_ms']")
    name = merged["name"]
    if not isinstance(name, str) or not name:
        raise _fail("name", name, "a non-empty string")
    return TrialConfig(
        name=name, seeds=tuple(seeds), engine=engine, dlfp=dict(merged["dlfp"]), workload=workload,
        ttft_slo_s=_number(slo, "ttft_ms", "slo", 0, 3.6e6) / 1000.0,
        tpot_slo_s=_number(slo, "tpot_ms", "slo", 0, 3.6e6) / 1000.0,
        telemetry_interval_s=_number(merged, "telemetry_interval_s", "", 0, 60),
        raw=merged,
    )


def load_config(path: str) -> TrialConfig:
    """Read a YAML config file; an empty file means the CPU defaults."""
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    return parse_config(raw or {})

