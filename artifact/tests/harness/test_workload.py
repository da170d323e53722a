"""Seeded workloads: determinism, the statistics they promise, Parquet round trips, validation."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.harness.workload import (
    LengthDist,
    RequestClass,
    WorkloadSpec,
    from_frame,
    generate,
    load,
    paper_mix,
    save,
    to_frame,
)


def tiny_spec(n: int, rate: float = 4.0, seed: int = 0, long_weight: float = 0.15) -> WorkloadSpec:
    """Few tokens per request, so large-n statistical tests stay fast."""
    one, two = LengthDist("fixed", 1, 1), LengthDist("fixed", 2, 2)
    return WorkloadSpec(n_requests=n, rate_rps=rate, seed=seed, vocab_size=64, classes=(
        RequestClass("short", 1.0 - long_weight, one, one),
        RequestClass("long", long_weight, two, one),
    ))


def test_same_seed_same_workload_and_seeds_differ() -> None:
    a, b = generate(paper_mix(40, seed=3)), generate(paper_mix(40, seed=3))
    assert a == b
    c = generate(paper_mix(40, seed=4))
    assert [r.arrival_s for r in a] != [r.arrival_s for r in c]
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in c]


def test_longer_run_extends_shorter_one() -> None:
    assert generate(paper_mix(60, seed=1))[:25] == generate(paper_mix(25, seed=1))


def test_rate_only_scales_arrivals() -> None:
    slow, fast = generate(paper_mix(30, rate_rps=2.0)), generate(paper_mix(30, rate_rps=4.0))
    assert [r.arrival_s for r in slow] == pytest.approx([2 * r.arrival_s for r in fast])
    assert [replace(r, arrival_s=0.0) for r in slow] == [replace(r, arrival_s=0.0) for r in fast]


def test_ids_arrivals_and_exact_prompt_lengths() -> None:
    spec = paper_mix(200, seed=7)
    reqs = generate(spec)
    assert [r.request_id for r in reqs[:3]] == ["r0000", "r0001", "r0002"]
    assert [r.index for r in reqs] == list(range(200))
    arrivals = np.array([r.arrival_s for r in reqs])
    assert arrivals[0] > 0 and np.all(np.diff(arrivals) >= 0)
    bounds = {"short": ((32, 256), (64, 160)), "long": ((1536, 2048), (8, 32))}
    for r in reqs:
        (plo, phi), (olo, ohi) = bounds[r.cls]
        assert plo <= r.prompt_len <= phi and olo <= r.output_len <= ohi
        assert len(r.prompt_token_ids) == r.prompt_len
        assert all(10 <= t < spec.vocab_size - 1 for t in r.prompt_token_ids)


def test_mean_arrival_rate() -> None:
    reqs = generate(tiny_spec(20000, rate=4.0, seed=11))
    gaps = np.diff([0.0] + [r.arrival_s for r in reqs])
    # The mean of 20000 exponential gaps has relative sd 1/sqrt(20000) = 0.7%: 3% is > 4 sd.
    assert 20000 / reqs[-1].arrival_s == pytest.approx(4.0, rel=0.03)
    # Exponential gaps have coefficient of variation 1 (a regular clock would give 0).
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


def test_class_weights_respected() -> None:
    reqs = generate(tiny_spec(5000, long_weight=0.15, seed=2))
    share = np.mean([r.cls == "long" for r in reqs])
    assert share == pytest.approx(0.15, abs=0.02)  # sd is 0.005
    assert {r.prompt_len for r in reqs if r.cls == "long"} == {2}


def test_length_dists() -> None:
    rng = np.random.default_rng(0)
    fixed = LengthDist("fixed", 128, 128)
    assert LengthDist.parse(128) == LengthDist.parse({"fixed": 128}) == fixed
    u = LengthDist.parse({"uniform": [3, 6]}).sample(rng, 2000)
    assert set(u.tolist()) == {3, 4, 5, 6}
    ln = LengthDist.parse({"lognormal": {"median": 100, "sigma": 1.0, "min": 20, "max": 400}})
    x = ln.sample(rng, 4000)
    assert x.dtype == np.int64 and x.min() == 20 and x.max() == 400
    assert np.median(x) == pytest.approx(100, rel=0.1)


def test_parquet_round_trip(tmp_path) -> None:
    reqs = generate(paper_mix(30, seed=5))
    df = to_frame(reqs)
    assert list(df.columns) == ["request_id", "index", "cls", "arrival_s", "prompt_len",
                                "output_len", "prompt_token_ids"]
    assert df["prompt_token_ids"].iloc[0].dtype == np.int32
    assert from_frame(df) == reqs
    path = tmp_path / "workload.parquet"
    save(reqs, path)
    save(reqs, path)  # replaces an existing file
    assert load(path) == reqs
    assert os.listdir(tmp_path) == ["workload.parquet"]  # no temp file left behind
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert meta.compression == "ZSTD"


def test_from_frame_refuses_inconsistent_prompt_len() -> None:
    df = to_frame(generate(paper_mix(3)))
    df.loc[1, "prompt_len"] = 5
    with pytest.raises(ValueError, match="r0001 has prompt_len=5"):
        from_frame(df)


def spec_dict(**overrides):
    d = {"n_requests": 10, "rate_rps": 2.0, "seed": 1, "classes": [
        {"name": "a", "weight": 1, "prompt_len": {"uniform": [8, 16]}, "output_len": 4}]}
    return {**d, **overrides}


def cls_dict(**overrides):
    return spec_dict(classes=[{**spec_dict()["classes"][0], **overrides}])


def test_from_dict_parses_yaml_like_input() -> None:
    spec = WorkloadSpec.from_dict(spec_dict(max_model_len=64, vocab_size=1000))
    assert spec.classes == (RequestClass("a", 1, LengthDist("uniform", 8, 16),
                                         LengthDist("fixed", 4, 4)),)
    assert spec.max_model_len == 64 and spec.vocab_size == 1000
    assert len(generate(spec)) == 10


@pytest.mark.parametrize(("raw", "message"), [
    (spec_dict(bogus=1), r"unknown key\(s\) \['bogus'\]"),
    (spec_dict(rate_rps=-1.0), r"rate_rps=-1.0 is invalid; allowed: finite number > 0"),
    (spec_dict(rate_rps=0), r"rate_rps=0 is invalid"),
    (spec_dict(n_requests=0), r"n_requests=0 is invalid; allowed: integer in \[1, 1000000\]"),
    (spec_dict(seed=-1), r"seed=-1 is invalid"),
    (spec_dict(vocab_size=15), r"vocab_size=15 is invalid; allowed: integer in \[16, "),
    (spec_dict(classes=[]), r"classes=\[\] is invalid"),
    ({"rate_rps": 1.0, "classes": []}, r"missing key\(s\) \['n_requests'\]"),
    (cls_dict(output_len=0),
     r"classes\[0\]\.output_len: fixed=0 is invalid; allowed: integer in \[1,"),
    (cls_dict(prompt_len={"uniform": [0, 4]}), r"classes\[0\]\.prompt_len: uniform\[0\]=0"),
    (cls_dict(prompt_len={"uniform": [9, 4]}),
     r"uniform\[0\], uniform\[1\]=\(9, 4\) is invalid; allowed: uniform\[0\] <= uniform\[1\]"),
    (cls_dict(prompt_len={"normal": 3}), r"classes\[0\]\.prompt_len: length="),
    (cls_dict(prompt_len={"lognormal": {"median": 5, "sigma": 1, "min": 1}}),
     r"lognormal: missing key\(s\) \['max'\]"),
    (cls_dict(prompt_len={"lognormal": {"median": 50, "sigma": 1, "min": 1, "max": 9}}),
     r"median=50 is invalid"),
    (cls_dict(weight=0), r"classes\[0\]: weight=0 is invalid; allowed: finite number > 0"),
    (cls_dict(colour="red"), r"classes\[0\]: unknown key\(s\) \['colour'\]"),
])
def test_validation_names_the_field(raw, message) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadSpec.from_dict(raw)


def test_duplicate_class_names_refused() -> None:
    c = spec_dict()["classes"][0]
    with pytest.raises(ValueError, match="unique class names"):
        WorkloadSpec.from_dict(spec_dict(classes=[c, c]))


def test_max_model_len_checked_at_generation_naming_the_class() -> None:
    spec = WorkloadSpec.from_dict(spec_dict(max_model_len=19))  # prompt 8..16 + output 4
    with pytest.raises(ValueError, match=r"max_model_len=19 is exceeded .* class\(es\) \['a'\]"):
        generate(spec)
    assert len(generate(replace(spec, max_model_len=20))) == 10


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 30), lo=st.integers(1, 40),
       span=st.integers(0, 40), vocab=st.integers(16, 100))
def test_generated_requests_respect_their_spec(seed, n, lo, span, vocab) -> None:
    spec = WorkloadSpec(n_requests=n, rate_rps=1.5, seed=seed, vocab_size=vocab, classes=(
        RequestClass("x", 1.0, LengthDist("uniform", lo, lo + span), LengthDist("fixed", 3, 3)),))
    reqs = generate(spec)
    assert len(reqs) == n
    for r in reqs:
        assert lo <= len(r.prompt_token_ids) <= lo + span and r.output_len == 3
        assert all(10 <= t < vocab - 1 for t in r.prompt_token_ids)
