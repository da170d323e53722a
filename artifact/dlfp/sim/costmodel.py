"""Roofline cost of one engine step on a modeled accelerator: pure arithmetic, no vLLM.

The modeled-accelerator mode runs vLLM's real engine core and scheduler and replaces the
model with a sleep of the time computed here, so every number must be traceable: the
device numbers come from a YAML profile (``profiles/*.yaml``) where each one is marked
"public spec" or "assumed", and the formula is small enough to check by hand.

For a step whose batch is a list of ``(n_i, c_i)`` (new tokens scheduled for request ``i``
and its context length before the step), on a tensor-parallel group of ``tp`` GPUs, with
``T = sum n_i`` tokens, ``R`` requests, ``L`` layers, ``d`` hidden size, ``H``/``H_kv``
query/KV heads of size ``h``, vocabulary ``V`` and ``b`` bytes per value::

    P_layer   = d*H*h + 2*d*H_kv*h + H*h*d + 3*d*I          (attention q,k,v,o + gated MLP)
    F_dense   = 2*L*P_layer*T + 2*d*V*R                     (logits only at each request's last token)
    F_attn    = L * sum_i 4*H*h*n_i*(c_i + n_i/2)           (QK^T and PV, causal within the chunk)
    B_weights = (L*P_layer + d*V) * b                       (read once per step; embedding rows ignored)
    B_kv      = L * sum_i 2*H_kv*h*c_i*b                    (cached K and V read by attention)
    t_compute = (F_dense/(peak*eff_mm) + F_attn/(peak*eff_attn)) / tp
    t_memory  = (B_weights + B_kv) / (bw*eff_mem) / tp
    t_allred  = 2*L*(lat + 2*(tp-1)/tp * T*d*b / (link_bw*eff_link))   (tp > 1; ring all-reduce)
    gpu_s     = max(t_compute, t_memory) + t_allred
    host_s    = step_fixed + per_request*R

Per GPU, TP splits heads, MLP columns and the vocabulary, so FLOPs and bytes divide by
``tp`` (``tp`` must divide the head counts); each layer adds two all-reduces of the
activations that are not overlapped with compute. ``host_s`` is the model runner's host
work per step (input preparation, launches, sampler bookkeeping); the engine core's own
scheduling and output processing are not modeled because they run for real. Norms,
rotary embeddings, activation traffic and KV writes are ignored: small next to the terms
kept, and each would cost a line of hand arithmetic per test case.

The host work of vLLM's engine core, which the real-time mode runs for real on the simulating machine
(``schedule()``, ``update_from_output``, the output path to the client and the input path of a new
request), is priced by an *engine-core cost profile* (:class:`EngineHost`, ``profiles/engine/*.yaml``)
apart from the device profiles: only the virtual-time driver (:mod:`dlfp.sim.virtual`) reads it, one
device can be paired with several hosts, and it is never zero (leaving the time between steps out is
what put BLIS's TTFT 17-56% low).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dlfp.control.fields import Rule

PROFILE_DIR = Path(__file__).with_name("profiles")
SOURCES = ("public spec", "assumed", "measured")
GiB = 1 << 30

def _positive(unit: str, doc: str, *, fraction: bool = False) -> Rule:
    """A profile number's rule: positive and finite, or a fraction in (0, 1]."""
    return Rule(unit, doc, "float", lo=0, hi=1 if fraction else math.inf, lo_open=True, hi_open=not fraction)


_SCHEMA: dict[str, dict[str, tuple[str, Rule]]] = {
    "compute": {
        "peak_tflops": ("peak_tflops", _positive("TFLOP/s", "Dense peak of the model's dtype (tensor cores, no "
                                                            "sparsity).")),
        "matmul_efficiency": ("matmul_efficiency", _positive("-", "The fraction of the peak a step's matmuls reach.",
                                                             fraction=True)),
        "attention_efficiency": ("attention_efficiency", _positive("-", "The fraction of the peak attention reaches.",
                                                                   fraction=True)),
    },
    "memory": {
        "bandwidth_gbps": ("memory_gbps", _positive("GB/s", "Memory bandwidth per GPU (10^9 bytes per second).")),
        "efficiency": ("memory_efficiency", _positive("-", "The fraction of the bandwidth a step's streaming "
                                                           "reaches.", fraction=True)),
        "capacity_gib": ("capacity_gib", _positive("GiB", "Memory per GPU.")),
        "activation_reserve_gib": ("activation_reserve_gib", _positive("GiB", "Held back per GPU for activations, "
                                                                              "CUDA graphs and the context.")),
    },
    "interconnect": {
        "bandwidth_gbps": ("link_gbps", _positive("GB/s", "GPU-to-GPU link bandwidth per GPU, both directions.")),
        "efficiency": ("link_efficiency", _positive("-", "The fraction of it an all-reduce reaches.", fraction=True)),
        "allreduce_latency_us": ("allreduce_latency_us", _positive("us", "The fixed latency of one all-reduce.")),
    },
    "host": {
        "step_fixed_us": ("host_step_us", _positive("us", "The model runner's host time per step (input "
                                                          "preparation, launch, sampler).")),
        "per_request_us": ("host_request_us", _positive("us", "The model runner's host time per scheduled request.")),
    },
}
"""A device profile's sections: key -> (:class:`Profile` field, its rule). Each value is ``{value, source}``."""
ENGINE_DIR = PROFILE_DIR / "engine"
ENGINE_SECTION = "engine"
_ENGINE_TOP = {"name", "description", "references", ENGINE_SECTION}
_ENGINE_KEYS: dict[str, tuple[str, Rule]] = {
    "schedule_us": ("schedule_us", _positive("us", "One `schedule()` call.")),
    "schedule_per_request_us": ("schedule_request_us", _positive("us", "`schedule()`'s time per request it "
                                                                       "schedules.")),
    "update_us": ("update_us", _positive("us", "One `update_from_output` call.")),
    "update_per_request_us": ("update_request_us", _positive("us", "Its time per request in the step.")),
    "output_us": ("output_us", _positive("us", "From the end of `update_from_output` until the client holds the "
                                               "step's tokens (output thread, serialization, ZMQ, the front end).")),
    "output_per_request_us": ("output_request_us", _positive("us", "Its time per request with output.")),
    "input_us": ("input_us", _positive("us", "From a request's arrival at the client until the engine core can "
                                             "schedule it.")),
}
"""An engine-core profile's ``engine`` section: key -> (:class:`EngineHost` field, its rule)."""
_TOP_LEVEL = {"name", "device", "references", *_SCHEMA}


@dataclass(frozen=True, slots=True)
class EngineHost:
    """Host time of vLLM's engine core per step, in microseconds (an engine-core profile's ``engine`` section).

    ``schedule``: one ``schedule()`` call, plus a term per request it schedules; ``update``: one
    ``update_from_output``, plus a term per request in the step; ``output``: from the end of
    ``update_from_output`` until the client holds the step's tokens (engine-core output thread,
    serialization, ZMQ, the front end's output processing), plus a term per request with output;
    ``input``: from a request's arrival at the client until the engine core can schedule it.
    """

    schedule_us: float
    schedule_request_us: float
    update_us: float
    update_request_us: float
    output_us: float
    output_request_us: float
    input_us: float

    def schedule_s(self, requests: int) -> float:
        return (self.schedule_us + self.schedule_request_us * requests) * 1e-6

    def update_s(self, requests: int) -> float:
        return (self.update_us + self.update_request_us * requests) * 1e-6

    def output_s(self, requests: int) -> float:
        return (self.output_us + self.output_request_us * requests) * 1e-6

    @property
    def input_s(self) -> float:
        return self.input_us * 1e-6

    def scaled(self, factor: float) -> EngineHost:
        """Every term times ``factor`` (a host that much slower; below 1, faster)."""
        return EngineHost(*(getattr(self, f) * factor for f in self.__slots__))


def engine_section(host: EngineHost, source: str) -> dict[str, dict[str, Any]]:
    """``host`` as a profile file's ``engine`` section, every value from ``source`` (one of :data:`SOURCES`)."""
    return {key: {"value": getattr(host, field), "source": source} for key, (field, _) in _ENGINE_KEYS.items()}


def parse_engine_host(raw: Any, origin: str = "engine profile") -> EngineHost:
    """An engine-core profile mapping (``name``, ``description``, ``references``, ``engine``), validated like
    a device profile: every value ``{value, source}``, positive, unknown keys refused by name."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{origin}: expected a mapping at top level")
    unknown = sorted(set(raw) - _ENGINE_TOP, key=str)
    if unknown:
        raise ValueError(f"{origin}: unknown key(s) {unknown}; known: {sorted(_ENGINE_TOP)}")
    body = _section(raw, ENGINE_SECTION, _ENGINE_KEYS, origin)
    return EngineHost(**{field: _number(body.get(key), f"{ENGINE_SECTION}.{key}", rule, origin)
                         for key, (field, rule) in _ENGINE_KEYS.items()})


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The dimensions of a decoder-only transformer that the cost model needs."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """Read a Hugging Face ``config.json`` dict (Llama/Qwen-style names and defaults)."""
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            return cls(
                hidden=hidden,
                layers=int(config["num_hidden_layers"]),
                heads=heads,
                kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                intermediate=int(config["intermediate_size"]),
                vocab=int(config["vocab_size"]),
                tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            )
        except KeyError as err:
            raise ValueError(f"model config lacks {err.args[0]!r}") from None

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelShape:
        """Read ``config.json`` from a model directory."""
        return cls.from_hf_config(json.loads((Path(path) / "config.json").read_text()))

    @property
    def layer_params(self) -> int:
        """Matmul weights of one layer: q, k, v, o projections and the gated MLP."""
        d, qd, kvd = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return d * qd + 2 * d * kvd + qd * d + 3 * d * self.intermediate

    @property
    def step_weight_params(self) -> int:
        """Weights a step streams from memory: all layers and the LM head."""
        return self.layers * self.layer_params + self.hidden * self.vocab

    @property
    def total_params(self) -> int:
        """Weights held in memory: layers, embedding and (unless tied) the LM head."""
        embeddings = self.hidden * self.vocab * (1 if self.tie_embeddings else 2)
        return self.layers * self.layer_params + embeddings

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True, slots=True)
class Profile:
    """Device numbers of one accelerator (one GPU of a TP group); see ``profiles/*.yaml``."""

    name: str
    device: str
    peak_tflops: float
    matmul_efficiency: float
    attention_efficiency: float
    memory_gbps: float
    memory_efficiency: float
    capacity_gib: float
    activation_reserve_gib: float
    link_gbps: float
    link_efficiency: float
    allreduce_latency_us: float
    host_step_us: float
    host_request_us: float


def parse_profile(raw: Any, origin: str = "profile") -> Profile:
    """Validate a profile mapping; errors name the offending key (``section.key``)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{origin}: expected a mapping at top level")
    unknown = sorted(set(raw) - _TOP_LEVEL, key=str)
    if unknown:
        raise ValueError(f"{origin}: unknown key(s) {unknown}; known: {sorted(_TOP_LEVEL)}")
    for key in ("name", "device"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ValueError(f"{origin}: {key!r} must be a non-empty string")
    references = raw.get("references", [])
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise ValueError(f"{origin}: 'references' must be a list of strings")
    values: dict[str, float] = {}
    for section, keys in _SCHEMA.items():
        body = _section(raw, section, keys, origin)
        for key, (field, rule) in keys.items():
            values[field] = _number(body.get(key), f"{section}.{key}", rule, origin)
    return Profile(name=raw["name"], device=raw["device"], **values)


def _section(raw: Mapping[str, Any], section: str, keys: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """``raw[section]``, a mapping holding only ``keys``: both profile kinds read their sections so."""
    body = raw.get(section)
    if not isinstance(body, Mapping):
        raise ValueError(f"{origin}: missing section {section!r}" if body is None else
                         f"{origin}: section {section!r} must be a mapping")
    unknown = sorted(set(body) - set(keys), key=str)
    if unknown:
        raise ValueError(f"{origin}: unknown key(s) {[f'{section}.{k}' for k in unknown]}")
    return body


def _number(entry: Any, key: str, rule: Rule, origin: str) -> float:
    if entry is None:
        raise ValueError(f"{origin}: missing {key!r}")
    if not isinstance(entry, Mapping) or set(entry) != {"value", "source"}:
        raise ValueError(f"{origin}: {key!r} must be {{value: <number>, source: <{' | '.join(SOURCES)}>}}")
    value, source = entry["value"], entry["source"]
    if source not in SOURCES:
        raise ValueError(f"{origin}: {key!r} source {source!r} must be one of {list(SOURCES)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{origin}: {key!r} value {value!r} is not a number")
    if not rule.accepts(value, None):
        raise ValueError(f"{origin}: {key!r} value {value!r} must be in {rule.allowed}")
    return float(value)


def markdown_table() -> str:
    """Every number of a device profile and of an engine-core profile (``book/reference/modeled.md``), each
    written ``{value, source}``: generated from :data:`_SCHEMA` and :data:`_ENGINE_KEYS`, which check them."""
    rows = ["| key | unit | allowed | meaning |", "| --- | --- | --- | --- |"]
    for section, keys in [*_SCHEMA.items(), (ENGINE_SECTION, _ENGINE_KEYS)]:
        rows += [f"| `{section}.{key}` | {rule.unit} | {rule.allowed} | {rule.doc} |"
                 for key, (_, rule) in keys.items()]
    return "\n".join(rows) + "\n"


def engine_file(name_or_path: str | Path) -> Path:
    """The file an engine-core profile name or path refers to."""
    path = ENGINE_DIR / f"{name_or_path}.yaml"
    return path if path.is_file() else Path(name_or_path)


def load_engine_host(name_or_path: str | Path) -> EngineHost:
    """A shipped engine-core profile by name (``"gpu-node"``) or a YAML file by path."""
    path = engine_file(name_or_path)
    if not path.is_file():
        shipped = sorted(p.stem for p in ENGINE_DIR.glob("*.yaml"))
        raise ValueError(f"unknown engine-core profile {str(name_or_path)!r}: use one of {shipped} or a YAML file path")
    return parse_engine_host(yaml.safe_load(path.read_text(encoding="utf-8")), origin=str(path))


def available_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped with the package."""
    return tuple(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))


def load_profile(name_or_path: str | Path) -> Any:
    """A shipped profile by name (``"a100"``) or a YAML file by path.

    Returns a :class:`Profile` (roofline), or a :class:`dlfp.sim.stepfit.FittedProfile`
    for a file with ``kind: fitted`` written by ``dlfp calibrate``.
    """
    path = profile_file(name_or_path)
    if not path.is_file():
        raise ValueError(f"unknown profile {str(name_or_path)!r}: use one of "
                         f"{list(available_profiles())} or a YAML file path")
    raw = yaml.safe_load(path.read_text())
    if isinstance(raw, Mapping) and raw.get("kind") == "fitted":
        from dlfp.sim.stepfit import parse_fitted_profile

        return parse_fitted_profile(raw, origin=str(path))
    return parse_profile(raw, origin=str(path))


def profile_file(name_or_path: str | Path) -> Path:
    """The file a profile name or path refers to (for checksums in manifests)."""
    path = PROFILE_DIR / f"{name_or_path}.yaml"
    return path if path.is_file() else Path(name_or_path)


@dataclass(frozen=True, slots=True)
class StepTime:
    """Modeled time of one step: on the GPU stream, and on the host before launch."""

    gpu_s: float
    host_s: float


def step_time(shape: ModelShape, profile: Profile, batch: Sequence[tuple[int, int]],
              tp: int = 1, dtype_bytes: int = 2) -> StepTime:
    """The module docstring's formula for ``batch`` = [(new tokens, context before), ...].

    An empty batch costs nothing: the engine does not run the model for it.
    """
    check_tp(shape, tp)
    if not batch:
        return StepTime(0.0, 0.0)
    tokens = sum(n for n, _ in batch)
    requests = len(batch)
    peak = profile.peak_tflops * 1e12
    dense_flops = 2 * shape.layers * shape.layer_params * tokens + 2 * shape.hidden * shape.vocab * requests
    attn_flops = shape.layers * sum(4 * shape.heads * shape.head_dim * n * (c + n / 2) for n, c in batch)
    compute_s = (dense_flops / (peak * profile.matmul_efficiency)
                 + attn_flops / (peak * profile.attention_efficiency)) / tp
    weight_bytes = shape.step_weight_params * dtype_bytes
    kv_bytes = shape.kv_bytes_per_token(dtype_bytes) * sum(c for _, c in batch)
    memory_s = (weight_bytes + kv_bytes) / (profile.memory_gbps * 1e9 * profile.memory_efficiency) / tp
    gpu_s = max(compute_s, memory_s) + allreduce_s(shape, profile, tokens, tp, dtype_bytes)
    host_s = (profile.host_step_us + profile.host_request_us * requests) * 1e-6
    return StepTime(gpu_s=gpu_s, host_s=host_s)


def allreduce_s(shape: ModelShape, profile: Profile, tokens: int, tp: int, dtype_bytes: int) -> float:
    """Two ring all-reduces of the step's activations per layer; zero without TP."""
    if tp == 1:
        return 0.0
    payload = tokens * shape.hidden * dtype_bytes
    one = (profile.allreduce_latency_us * 1e-6
           + 2 * (tp - 1) / tp * payload / (profile.link_gbps * 1e9 * profile.link_efficiency))
    return 2 * shape.layers * one


def check_tp(shape: ModelShape, tp: int) -> None:
    """TP must split query and KV heads evenly (vLLM's own requirement for these models)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp must be a positive integer, got {tp!r}")
    if shape.heads % tp or shape.kv_heads % tp:
        raise ValueError(f"tp={tp} does not divide {shape.heads} heads and {shape.kv_heads} KV heads")


def kv_cache_bytes(shape: ModelShape, profile: Profile, tp: int, dtype_bytes: int,
                   memory_utilization: float) -> int:
    """KV-cache memory of the whole TP group: the usable HBM minus weights and activations.

    ``memory_utilization`` is vLLM's ``gpu_memory_utilization``; the modeled device, not
    the host running the simulation, sets how many requests fit before preemption.
    """
    check_tp(shape, tp)
    usable = tp * (profile.capacity_gib * memory_utilization - profile.activation_reserve_gib) * GiB
    free = int(usable - shape.total_params * dtype_bytes)
    if free <= 0:
        raise ValueError(f"{shape.total_params * dtype_bytes / GiB:.1f} GiB of weights leave no KV cache on "
                         f"{tp} x {profile.name} at memory utilization {memory_utilization}")
    return free
