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

Each setting is declared once, with its unit, allowed values and meaning (:mod:`dlfp.control.fields`), in
the class that holds it: :class:`RunSettings` and :class:`SLOs` here, :class:`~dlfp.harness.engine.EngineSpec`,
:class:`~dlfp.trials.arms.ArmSpec`, :class:`~dlfp.trials.design.DesignSpec` and its rules,
:class:`~dlfp.harness.workload.WorkloadSpec`. The checks, their messages and the reference pages' tables come
from those declarations; what lies between settings (an arm's requests within the workload's, lengths within
the model length) is checked here.

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
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.fields import name, number, refuse_invalid, switch
from dlfp.control.params import DLFPConfigError, parse_params
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import PAPER_MIX_CLASSES, WorkloadSpec
from dlfp.trials.arms import ArmSpec, arm_engine, parse_arms
from dlfp.trials.arms import config_error as _fail
from dlfp.trials.design import DesignSpec
from dlfp.trials.schema import Manifest

DEFAULT_ARMS: list[dict[str, Any]] = [{"name": "stock"}, {"name": "dlfp", "dlfp": {}}]
TRIAL_DLFP: dict[str, Any] = {"saturation_guard": False}
"""What a trial's arms run with unless the config's ``dlfp`` or the arm's says otherwise: the paper's law as
published had no saturation guard (:mod:`dlfp.control.guard`), the artifact's trials reproduce it, and every
run committed before the guard existed ran without one (so its manifest reads back as it ran). The plug-in's
own default is on; the controller arms of the studies turn it on."""

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
    "reuse_engine": False,
    "warmup_requests": 16,
    "token_ids": True,
}


@dataclass(frozen=True)
class RunSettings:
    """A config's top-level settings besides its mappings (engine, dlfp, arms, design, workload, slo) and
    ``seeds``, each declared once with its unit, allowed values and meaning (:mod:`dlfp.control.fields`):
    the check, its message and the reference page's table (:func:`settings_table`) come from them."""

    name: str = name("cpu-default", "The run's name, in its manifest and tables.")
    trials: int = number(3, "trials", 1, 1000, "Paired trials, each a seed (seeds) and every arm on it.")
    reuse_engine: bool = switch(False, "true: consecutive units of one engine configuration replay on one engine, "
                                       "reset between them (dlfp.harness.arm.run_arms).")
    warmup_requests: int = number(16, "requests", 0, 10_000, "Requests every engine replays, discarded, before its "
                                  "first measured workload: the first of that workload's, at its rate, so prefill, "
                                  "decode and mixed steps have all run once (a cold engine's first requests pay "
                                  "one-time costs).")
    token_ids: bool = switch(True, "Keep every output token's id in tokens.parquet (each request's output digest "
                                   "is kept either way); a sweep of many units drops them.")
    telemetry_interval_s: float = number(0.5, "s", 0, 60, "How often the machine's CPU and GPUs are sampled "
                                                          "during a unit.", lo_open=True)

    def __post_init__(self) -> None:
        refuse_invalid(self, _fail)


@dataclass(frozen=True)
class SLOs:
    """The config's ``slo`` mapping: the two latency SLOs every table judges attainment by."""

    ttft_ms: float = number(5000.0, "ms", 0, 3.6e6, "P99 time-to-first-token SLO (scaled designs set it from "
                                                    "the pre-flight).", lo_open=True)
    tpot_ms: float = number(100.0, "ms", 0, 3.6e6, "Per-output-token latency SLO, the inter-token one (scaled "
                                                   "designs set it from the pre-flight).", lo_open=True)

    def __post_init__(self) -> None:
        refuse_invalid(self, lambda key, value, allowed: _fail(f"slo.{key}", value, allowed))


def settings_table() -> str:
    """:class:`RunSettings` as the trial reference's Markdown table (``book/reference/trials.md`` holds it)."""
    return fields_table(RunSettings, "key")


def slo_table() -> str:
    """:class:`SLOs` as the trial reference's Markdown table of the ``slo`` mapping."""
    return fields_table(SLOs, "key")


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
    reuse_engine: bool = False
    """Replay consecutive units of one engine configuration on one engine (:func:`dlfp.harness.arm.run_arms`)."""
    warmup_requests: int = 16
    """Requests every engine replays (discarded) before its first measured workload: the first of that
    workload's, at its rate, so prefill, decode and mixed steps have all run once. A cold engine's first
    requests pay one-time costs: ``dlfp bench reuse`` measured P99 TTFT 14-27 ms higher cold than warmed
    (95% CI) on the modeled A100 with Qwen3-0.6B, where the whole P99 TTFT is about 40 ms; a pooled P99 of
    100 requests would see it. ``vllm bench serve`` likewise sends one test prompt before it measures.
    Runs that test the harness rather than a latency set fewer: the pipeline's reduced runs,
    ``configs/cpu-smoke.yaml`` and gpu-check's CPU dry run (``configs/gpu-check-cpu.yaml``)."""
    token_ids: bool = True
    """Keep every output token's id in ``tokens.parquet``. Each request's output digest
    (``requests.output_digest``) is kept either way, so outputs are compared across arms without them;
    a sweep of many units (the capacity study) drops them: they are two thirds of a token row stored."""

    def workload_spec(self, seed: int, arm: str | None = None) -> WorkloadSpec:
        """A trial's seeded workload; for ``arm``, at its own ``rate_rps`` and ``n_requests`` where it
        has them: the first of the same requests, their arrival gaps scaled (every stream is drawn
        element by element, and the gap stream does not depend on the rate's value)."""
        a = None if arm is None else self.arm(arm)
        own = {} if a is None else {k: v for k, v in (("rate_rps", a.rate_rps), ("n_requests", a.n_requests))
                                     if v is not None}
        return WorkloadSpec.from_dict({**self.workload, "seed": seed, **own})

    @property
    def arm_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms)

    def arms_in(self, trial: int) -> tuple[str, ...]:
        """The arms trial ``trial`` (0-based) runs, in config order: those whose own ``trials`` reach it."""
        return tuple(a.name for a in self.arms if a.trials is None or trial < a.trials)

    @property
    def unit_count(self) -> int:
        """Units of a run of this config: each trial's arms (:meth:`arms_in`)."""
        return sum(len(self.arms_in(k)) for k in range(len(self.seeds)))

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
        params = {**self.arm_dlfp(arm), "enabled": enabled}
        return EngineSpec(**{**arm_engine(self.engine.__dict__, a.engine), "dlfp": params})

    def arm_dlfp(self, arm: str) -> dict[str, Any]:
        """The DLFP parameters an arm runs with, as one writes them in ``additional_config["dlfp"]`` (the
        runner adds ``enabled``): :data:`TRIAL_DLFP`, then the config's, then the arm's."""
        return {**TRIAL_DLFP, **self.dlfp, **(self.arm(arm).dlfp or {})}

    def arm_label(self, arm: str) -> str:
        """:attr:`ArmSpec.label`, plus the ``max_num_seqs`` the arm ran with when :func:`arm_engine`
        lowered it (so a table never hides a setting that differs from stock's)."""
        label, seqs = self.arm(arm).label, self.engine_for(arm).max_num_seqs
        return label if seqs == self.engine.max_num_seqs else f"{label}, max_num_seqs={seqs} (lowered to the budget)"

    def with_overrides(self, overrides: Mapping[str, Any]) -> TrialConfig:
        """This config with a design's overrides merged in (validated again)."""
        return parse_config(merge(self.raw, overrides))


def _engine(raw: Any) -> EngineSpec:
    if not isinstance(raw, Mapping):
        raise _fail("engine", raw, "a mapping of engine settings")
    known = {f.name for f in fields(EngineSpec)} - {"dlfp"}
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise ValueError(f"unknown engine setting(s) {unknown}; known: {sorted(known)}")
    spec = EngineSpec(**raw)  # each setting checked against its declaration (dlfp.harness.engine)
    if spec.sim is not None:
        from dlfp.sim.config import CONFIG_KEY, SimConfigError, parse_sim_config

        try:
            sim = parse_sim_config({CONFIG_KEY: spec.sim})
        except SimConfigError as exc:
            raise ValueError(f"config field 'engine.sim': {exc}") from None
        if sim.virtual:
            from dlfp.sim.costmodel import load_engine_host

            try:
                load_engine_host(sim.engine)
            except ValueError as exc:
                raise ValueError(f"config field 'engine.sim.engine': {exc}") from None
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
    run = RunSettings(**{f.name: merged[f.name] for f in fields(RunSettings)})
    trials = run.trials
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
    arms = parse_arms(merged["arms"], engine, _engine)
    try:
        design = DesignSpec.parse(merged["design"])
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    loaded = [i for i, a in enumerate(arms) if a.load is not None]
    if loaded and design.kind != "capacity":
        raise _fail(f"arms[{loaded[0]}].load", arms[loaded[0]].load, "unset: an arm's load belongs to a capacity "
                    "design (design.kind: capacity), which turns it into the arm's rate")
    workload = dict(merged["workload"])
    if "seed" in workload:
        raise _fail("workload.seed", workload["seed"], "unset: trial seeds come from 'seeds'")
    spec = WorkloadSpec.from_dict({**workload, "seed": 0})  # validates every workload field
    beyond = [i for i, a in enumerate(arms) if a.trials is not None and a.trials > trials]
    if beyond:
        raise _fail(f"arms[{beyond[0]}].trials", arms[beyond[0]].trials, f"at most trials = {trials}")
    over = [i for i, a in enumerate(arms) if a.n_requests is not None and a.n_requests > spec.n_requests]
    if over:
        raise _fail(f"arms[{over[0]}].n_requests", arms[over[0]].n_requests,
                    f"at most workload.n_requests = {spec.n_requests} (an arm replays the first of its trial's)")
    limit, field = min((engine.max_model_len, "engine.max_model_len"),
                       (spec.max_model_len or engine.max_model_len, "workload.max_model_len"))
    for i, c in enumerate(spec.classes):  # refused only after the pre-flight otherwise (vLLM, or the workload's draw)
        need = c.prompt_len.hi + c.output_len.hi
        if need > limit:
            raise _fail(field, limit, f">= {need}: workload.classes[{i}] ({c.name!r}) can ask prompt_len + "
                        f"output_len = {c.prompt_len.hi} + {c.output_len.hi} = {need} tokens (its largest lengths), "
                        f"more than {field} = {limit}")
    if engine.virtual:
        _check_virtual(merged)
    unknown = sorted(set(merged["slo"]) - {f.name for f in fields(SLOs)}, key=str)
    if unknown:
        raise ValueError(f"unknown slo field(s) {unknown}; known: {sorted(f.name for f in fields(SLOs))}")
    slo = SLOs(**merged["slo"])
    return TrialConfig(
        name=run.name, seeds=tuple(seeds), engine=engine, dlfp=dict(merged["dlfp"]), arms=arms, design=design,
        workload=workload, ttft_slo_s=float(slo.ttft_ms) / 1000.0, tpot_slo_s=float(slo.tpot_ms) / 1000.0,
        telemetry_interval_s=float(run.telemetry_interval_s), raw=merged, reuse_engine=run.reuse_engine,
        warmup_requests=run.warmup_requests, token_ids=run.token_ids,
    )


REAL_TIME_ONLY = ("reuse_engine", "telemetry_interval_s", "warmup_requests")
"""Config fields that mean something only for a started engine: sharing one engine's start-up across
units, sampling the machine's hardware, warming the engine's process. A virtual run (``engine.sim.clock:
virtual``) builds a fresh in-process engine core per unit and reads no hardware, so a value other than
the default is refused rather than silently ignored."""
VIRTUAL_EXTRA = ("block_size", "num_gpu_blocks_override", "max_num_partial_prefills", "max_long_partial_prefills",
                 "scheduling_policy", "enable_chunked_prefill")
"""``engine.extra`` arguments a virtual run takes: they set vLLM's scheduler and KV cache, which run for
real there. Any other engine argument changes what the model runner or the worker processes do, which
virtual time does not model."""


def _check_virtual(merged: Mapping[str, Any]) -> None:
    """Refuse, before any work, what a virtual run would ignore or cannot model (:data:`REAL_TIME_ONLY`,
    :data:`VIRTUAL_EXTRA`, the CPU build's KV-cache space)."""
    for key in REAL_TIME_ONLY:
        if merged[key] != CPU_DEFAULT[key]:
            raise _fail(key, merged[key], f"unset (default {CPU_DEFAULT[key]!r}) with engine.sim.clock: virtual, "
                        "where it means nothing: it sets up a started engine, and a virtual run starts none")
    engine = merged["engine"]
    if engine.get("kv_cache_gib", CPU_DEFAULT["engine"]["kv_cache_gib"]) != CPU_DEFAULT["engine"]["kv_cache_gib"]:
        raise _fail("engine.kv_cache_gib", engine["kv_cache_gib"], "unset with engine.sim: the CPU build's KV space "
                    "(VLLM_CPU_KVCACHE_SPACE); the modeled device's memory sizes the cache")
    extra = sorted(set(engine.get("extra") or {}) - set(VIRTUAL_EXTRA))
    if extra:
        raise _fail("engine.extra", engine["extra"], f"only {list(VIRTUAL_EXTRA)} with engine.sim.clock: virtual; "
                    f"{extra} change what virtual time does not model (run them with clock: real)")


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into a deep copy of ``base``: mappings key by key, anything else replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def run_config(manifest: Manifest) -> TrialConfig:
    """The config a run really ran: its requested config with its design's overrides merged in.

    Runs made before designs existed have no ``design`` record: their config ran as written.
    """
    raw = dict(manifest.config)
    if manifest.design is None:
        raw.setdefault("design", {"kind": "fixed"})
    return parse_config(merge(raw, (manifest.design or {}).get("overrides") or {}))


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

