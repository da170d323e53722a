"""Seeded workloads: determinism, the statistics they promise, Parquet round trips, validation;
bursty (gamma) arrivals and clipped heavy-tailed classes; committed runs' workloads regenerate
to the same bytes."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dlfp.harness.workload import (
    Arrival,
    LengthDist,
    RequestClass,
    WorkloadSpec,
    arrival_times,
    from_frame,
    generate,
    load,
    paper_mix,
    save,
    to_frame,
    truncation,
)
from dlfp.paths import REPO_ROOT, sha256
from dlfp.trials.config import run_config
from dlfp.trials.schema import read_manifest


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
    (spec_dict(rate_rps=-1.0), r"rate_rps=-1.0 is invalid; allowed: \[1e-06, 1000000\]"),
    (spec_dict(rate_rps=0), r"rate_rps=0 is invalid"),
    (spec_dict(n_requests=0), r"n_requests=0 is invalid; allowed: \[1, 1000000\]"),
    (spec_dict(seed=-1), r"seed=-1 is invalid"),
    (spec_dict(vocab_size=15), r"vocab_size=15 is invalid; allowed: \[16, 2147483647\]"),
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
    (cls_dict(weight=0), r"classes\[0\]: weight=0 is invalid; allowed: \(0, inf\)"),
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


# --- bursty arrivals -------------------------------------------------------------------------------


def gamma_spec(n: int, burstiness: float | None, rate: float = 4.0, seed: int = 0) -> WorkloadSpec:
    arrival = Arrival() if burstiness is None else Arrival("gamma", burstiness)
    return replace(tiny_spec(n, rate=rate, seed=seed), arrival=arrival)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_the_shapes_spread(burstiness) -> None:
    gaps = np.diff(arrival_times(gamma_spec(20000, burstiness, rate=4.0, seed=5)), prepend=0.0)
    cv = 1 / math.sqrt(burstiness)  # a gamma of shape k has coefficient of variation 1 / sqrt(k)
    # The mean of 20000 gaps has relative sd cv / sqrt(20000) <= 1.4 %: 7 % is > 4 sd at burstiness 0.25.
    assert gaps.mean() == pytest.approx(0.25, rel=0.07)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
    assert (gaps >= 0).all() and np.isfinite(gaps).all()


def test_burstiness_one_is_the_poisson_distribution() -> None:
    """Gamma gaps of shape 1 are exponential: two-sample KS against Poisson gaps of another seed, and
    one-sample against the exponential of mean 1 / rate (p > 1e-3 fails one seed in a thousand)."""
    gamma = np.diff(arrival_times(gamma_spec(5000, 1.0, seed=1)), prepend=0.0)
    poisson = np.diff(arrival_times(gamma_spec(5000, None, seed=2)), prepend=0.0)
    assert stats.ks_2samp(gamma, poisson).pvalue > 1e-3
    assert stats.kstest(gamma, "expon", args=(0, 0.25)).pvalue > 1e-3
    assert stats.kstest(np.diff(arrival_times(gamma_spec(5000, 0.3, seed=1)), prepend=0.0), "expon",
                        args=(0, 0.25)).pvalue < 1e-6  # and a bursty shape is not
    # numpy draws a shape-1 gamma as an exponential, so on one seed they are even the same instants
    # (Arrival's docstring says so; not required, only the distribution is).
    assert arrival_times(gamma_spec(300, 1.0, seed=9)) == pytest.approx(arrival_times(gamma_spec(300, None, seed=9)))


def test_arrival_unset_null_and_poisson_are_the_same_workload() -> None:
    base = spec_dict(n_requests=30)
    same = [generate(WorkloadSpec.from_dict(raw)) for raw in
            (base, {**base, "arrival": None}, {**base, "arrival": {"kind": "poisson"}})]
    assert same[0] == same[1] == same[2]


def test_burstiness_changes_the_arrivals_only() -> None:
    poisson, bursty = generate(gamma_spec(200, None, seed=4)), generate(gamma_spec(200, 0.3, seed=4))
    assert [r.arrival_s for r in poisson] != [r.arrival_s for r in bursty]
    assert [replace(r, arrival_s=0.0) for r in poisson] == [replace(r, arrival_s=0.0) for r in bursty]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(2, 60), burstiness=st.floats(1e-3, 1e3),
       median=st.integers(4, 60), sigma=st.floats(0, 3))
def test_gamma_and_lognormal_workloads_are_seeded_and_keep_the_sweep_properties(seed, n, burstiness, median,
                                                                                 sigma) -> None:
    heavy = RequestClass("heavy", 1.0, LengthDist("lognormal", 2, 80, median, sigma), LengthDist("uniform", 1, 9))
    spec = WorkloadSpec(n_requests=n, rate_rps=2.0, seed=seed, vocab_size=64, classes=(heavy,),
                        arrival=Arrival("gamma", burstiness))
    reqs = generate(spec)
    assert reqs == generate(spec)  # seeded
    assert generate(replace(spec, n_requests=n // 2)) == reqs[: n // 2]  # a longer run extends a shorter one
    faster = generate(replace(spec, rate_rps=8.0))
    assert [4 * r.arrival_s for r in faster] == pytest.approx([r.arrival_s for r in reqs])
    assert all(2 <= r.prompt_len <= 80 for r in reqs)


@pytest.mark.parametrize(("arrival", "message"), [
    ({"kind": "bursty"}, r"arrival: kind='bursty' is invalid; allowed: poisson or gamma"),
    ({"kind": "gamma"}, r"arrival: missing key\(s\) \['burstiness'\] for kind gamma"),
    ({"kind": "gamma", "burstiness": 0}, r"arrival: burstiness=0 is invalid; allowed: \[0.001, 1000\]"),
    ({"kind": "gamma", "burstiness": True}, r"arrival: burstiness=True is invalid"),
    ({"kind": "gamma", "burstiness": float("inf")}, r"arrival: burstiness=inf is invalid"),
    ({"kind": "poisson", "burstiness": 0.5}, r"arrival: burstiness=0.5 is invalid; allowed: unset for kind poisson"),
    ({"kind": "gamma", "burstiness": 2, "cv": 1}, r"arrival: unknown key\(s\) \['cv'\]"),
    ("gamma", r"arrival must be a mapping, got 'gamma'"),
])
def test_bad_arrivals_are_refused_naming_the_field(arrival, message) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadSpec.from_dict(spec_dict(arrival=arrival))


# --- heavy-tailed classes --------------------------------------------------------------------------


def test_truncation_counts_the_requests_clipping_moved() -> None:
    chat = {"name": "chat", "weight": 3, "prompt_len": {"lognormal": {"median": 40, "p90": 200, "min": 8, "max": 120}},
            "output_len": {"uniform": [1, 4]}}
    spec = WorkloadSpec.from_dict(spec_dict(n_requests=2000, vocab_size=64, classes=[chat, cls_dict()["classes"][0]]))
    record, reqs = truncation(spec), generate(spec)
    mine = [r for r in reqs if r.cls == "chat"]
    assert record["chat"]["requests"] == len(mine) and record["a"]["requests"] == 2000 - len(mine)
    moved = record["chat"]["prompt_len"]
    at_max, at_min = sum(r.prompt_len == 120 for r in mine), sum(r.prompt_len == 8 for r in mine)
    assert 0 < moved["lowered_to_max"] <= at_max and 0 < moved["raised_to_min"] <= at_min
    assert record["a"] == {"requests": 2000 - len(mine), "prompt_len": {"raised_to_min": 0, "lowered_to_max": 0},
                           "output_len": {"raised_to_min": 0, "lowered_to_max": 0}}
    assert json.loads(json.dumps(record)) == record  # plain ints, for a manifest


def test_a_long_context_class_reaches_32k_within_the_model_length() -> None:
    ctx = {"name": "ctx", "prompt_len": {"uniform": [8192, 32768]}, "output_len": {"uniform": [16, 128]}}
    spec = WorkloadSpec.from_dict(spec_dict(n_requests=12, max_model_len=32896, vocab_size=64, classes=[ctx]))
    assert all(8192 <= r.prompt_len <= 32768 for r in generate(spec))


# --- committed runs regenerate -----------------------------------------------------------------------

RUNS = REPO_ROOT / "data" / "runs"
COMMITTED = ["cpu-default", *sorted(f"generalization-sim/{p.name}" for p in (RUNS / "generalization-sim").iterdir()
                                    if (p / "manifest.json").exists()), "study-baselines/cpu-tiny"]


@pytest.mark.parametrize("run", COMMITTED)
def test_committed_runs_regenerate_their_workloads_byte_for_byte(run: str, tmp_path: Path) -> None:
    """What the runner does on resume (trials/runner.py ``_workload_for``: regenerate from config and
    seed, compare with the committed workload.parquet), plus the bytes the manifest's checksum vouches for.
    Fails when a change to workload.py or lengths.py moves a single draw of an existing config."""
    folder = RUNS / run
    manifest = read_manifest(folder)
    config = run_config(manifest)
    seeds = {u.trial: u.seed for u in manifest.units}
    assert seeds and manifest.workloads and set(manifest.workloads) == {f"trial-{k}/workload.parquet" for k in seeds}
    for trial, seed in sorted(seeds.items()):
        name = f"trial-{trial}/workload.parquet"
        requests = generate(config.workload_spec(seed))
        assert load(folder / name) == requests, f"{run}/{name}: seed {seed} no longer draws this workload"
        save(requests, tmp_path / "w.parquet")
        assert sha256(tmp_path / "w.parquet") == manifest.workloads[name], (
            f"{run}/{name}: same requests, other bytes (a pyarrow or pandas upgrade changes Parquet metadata)")
