"""The roofline cost model against hand arithmetic, and profile validation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dlfp.paths import model_path
from dlfp.sim.costmodel import (
    GiB,
    ModelShape,
    available_profiles,
    kv_cache_bytes,
    load_profile,
    parse_profile,
    step_time,
)

# A shape small enough to price by hand: q,k,v,o = 8*8 + 2*8*8 + 8*8 = 256, MLP = 3*8*16
# = 384, so 640 weights per layer; a step streams 2*640 + 8*10 (LM head) = 1360 weights.
TINY = ModelShape(hidden=8, layers=2, heads=2, kv_heads=2, head_dim=4, intermediate=16, vocab=10,
                  tie_embeddings=False)


def _entry(value: float, source: str = "assumed") -> dict:
    return {"value": value, "source": source}


# Round numbers: 1000 FLOP/s peak, 1000 B/s memory, 1000 B/s links.
RAW = {
    "name": "toy",
    "device": "hand-checkable toy",
    "compute": {"peak_tflops": _entry(1e-9), "matmul_efficiency": _entry(0.5),
                "attention_efficiency": _entry(0.25)},
    "memory": {"bandwidth_gbps": _entry(1e-6), "efficiency": _entry(0.4), "capacity_gib": _entry(1),
               "activation_reserve_gib": _entry(0.25)},
    "interconnect": {"bandwidth_gbps": _entry(1e-6), "efficiency": _entry(0.5),
                     "allreduce_latency_us": _entry(1e6)},
    "host": {"step_fixed_us": _entry(100), "per_request_us": _entry(10)},
}
TOY = parse_profile(RAW)


def test_tiny_shape_counts() -> None:
    assert TINY.layer_params == 640
    assert TINY.step_weight_params == 1360
    assert TINY.total_params == 2 * 640 + 2 * 80
    assert TINY.kv_bytes_per_token(2) == 2 * 2 * 2 * 4 * 2


def test_decode_step_by_hand() -> None:
    # One decode token over 3 cached tokens, 2-byte values.
    # FLOPs: dense 2*2*640 + LM head 2*8*10 = 2720 at 500 FLOP/s; attention
    # 2 layers * 4*2*4*1*(3 + 0.5) = 224 at 250 FLOP/s: 5.44 + 0.896 = 6.336 s.
    # Bytes: weights 1360*2 = 2720, KV 2*2*2*4*3*2 = 192: 2912 B at 400 B/s = 7.28 s.
    t = step_time(TINY, TOY, [(1, 3)], tp=1, dtype_bytes=2)
    assert t.gpu_s == pytest.approx(7.28)  # memory-bound
    assert t.host_s == pytest.approx(110e-6)


def test_prefill_step_is_compute_bound_by_hand() -> None:
    # 10 new tokens, no context: dense 2*2*640*10 + 160 = 25760 -> 51.52 s; attention
    # 2 * 4*2*4*10*(0 + 5) = 3200 -> 12.8 s; bytes 2720 -> 6.8 s. Compute wins.
    t = step_time(TINY, TOY, [(10, 0)])
    assert t.gpu_s == pytest.approx(51.52 + 12.8)


def test_memory_to_compute_switch_on_a_real_shape() -> None:
    shape, a100 = ModelShape.from_dir(model_path("qwen3-8b")), load_profile("a100")
    bw = a100.memory_gbps * 1e9 * a100.memory_efficiency
    decode = step_time(shape, a100, [(1, 0)])
    assert decode.gpu_s == pytest.approx(shape.step_weight_params * 2 / bw)
    prefill = step_time(shape, a100, [(4096, 0)])
    peak = a100.peak_tflops * 1e12
    dense = 2 * shape.layers * shape.layer_params * 4096 + 2 * shape.hidden * shape.vocab
    attn = shape.layers * 4 * shape.heads * shape.head_dim * 4096 * 2048
    assert prefill.gpu_s == pytest.approx(dense / (peak * a100.matmul_efficiency)
                                          + attn / (peak * a100.attention_efficiency))
    times = [step_time(shape, a100, [(n, 0)]).gpu_s for n in (1, 8, 64, 512, 4096)]
    assert times == sorted(times) and times[1] == pytest.approx(times[0], rel=1e-3)  # flat while memory-bound


def test_tp_halves_bytes_and_adds_allreduce() -> None:
    one = step_time(TINY, TOY, [(1, 3)], tp=1)
    two = step_time(TINY, TOY, [(1, 3)], tp=2)
    # Per GPU: 2912/2 B at 400 B/s = 3.64 s (compute 6.336/2 = 3.168 s stays below).
    # All-reduce: 2 per layer * 2 layers * (1 s latency + 2*(1/2) * 1*8*2 B / 500 B/s).
    allreduce = 4 * (1.0 + 16 / 500)
    assert two.gpu_s == pytest.approx(one.gpu_s / 2 + allreduce)
    assert two.host_s == one.host_s


def test_empty_batch_costs_nothing() -> None:
    assert step_time(TINY, TOY, []).gpu_s == 0.0


def test_tp_must_divide_heads() -> None:
    with pytest.raises(ValueError, match="tp=4 does not divide 2 heads and 2 KV heads"):
        step_time(TINY, TOY, [(1, 0)], tp=4)
    with pytest.raises(ValueError, match="positive integer"):
        step_time(TINY, TOY, [(1, 0)], tp=0)


def test_kv_cache_memory_by_hand() -> None:
    # One GPU: 1 GiB * 0.5 - 0.25 GiB, minus (1280 + 160) weights * 2 bytes; two GPUs: twice the HBM.
    assert kv_cache_bytes(TINY, TOY, 1, 2, 0.5) == int(0.25 * GiB - 1440 * 2)
    assert kv_cache_bytes(TINY, TOY, 2, 2, 0.5) == int(0.5 * GiB - 1440 * 2)
    shape = ModelShape.from_dir(model_path("qwen3-32b"))
    with pytest.raises(ValueError, match="leave no KV cache"):
        kv_cache_bytes(shape, load_profile("a100"), 1, 2, 0.5)
    assert kv_cache_bytes(shape, load_profile("a100"), 2, 2, 0.5) > 0


def test_shapes_from_shipped_configs() -> None:
    shape = ModelShape.from_dir(model_path("qwen3-8b"))
    assert (shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.head_dim) == (4096, 36, 32, 8, 128)
    assert shape.total_params == pytest.approx(8.19e9, rel=0.01)  # Qwen3-8B: 8.2B parameters
    tiny = ModelShape.from_dir(model_path("qwen3-tiny"))
    assert tiny.tie_embeddings and tiny.total_params == tiny.layers * tiny.layer_params + 256 * 32000
    with pytest.raises(ValueError, match="'vocab_size'"):
        ModelShape.from_hf_config({"num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 1,
                                   "intermediate_size": 8})


def test_shipped_profiles_carry_the_public_specs() -> None:
    assert {"a100", "h200"} <= set(available_profiles())
    a100, h200 = load_profile("a100"), load_profile("h200")
    assert (a100.peak_tflops, a100.memory_gbps, a100.link_gbps) == (312, 2039, 600)
    assert (h200.peak_tflops, h200.memory_gbps, h200.link_gbps) == (989, 4800, 900)


def test_load_profile_by_path_and_unknown_name(tmp_path: Path) -> None:
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(RAW))
    assert load_profile(path) == TOY
    with pytest.raises(ValueError, match="unknown profile 'b200'"):
        load_profile("b200")


def _broken(section: str | None, key: str, value: object) -> dict:
    raw = copy.deepcopy(RAW)
    (raw if section is None else raw[section])[key] = value
    return raw


@pytest.mark.parametrize(("raw", "message"), [
    (_broken("compute", "peak_tflop", _entry(1)), r"compute\.peak_tflop"),
    (_broken(None, "hosts", {}), "'hosts'"),
    (_broken("memory", "efficiency", _entry(1.2)), r"'memory\.efficiency' value 1\.2 must be in \(0, 1\]"),
    (_broken("memory", "bandwidth_gbps", _entry(0)), r"'memory\.bandwidth_gbps' value 0"),
    (_broken("host", "per_request_us", _entry("8")), r"'host\.per_request_us' value '8' is not a number"),
    (_broken("host", "per_request_us", _entry(8, "guess")), r"'host\.per_request_us' source 'guess'"),
    (_broken("host", "per_request_us", 8), r"'host\.per_request_us' must be \{value"),
    ({k: v for k, v in RAW.items() if k != "interconnect"}, "missing section 'interconnect'"),
    (_broken("compute", "matmul_efficiency", None), r"missing 'compute\.matmul_efficiency'"),
    (_broken(None, "name", ""), "'name' must be a non-empty string"),
    (_broken(None, "references", "datasheet"), "'references' must be a list of strings"),
])
def test_profile_validation_names_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_profile(raw)
