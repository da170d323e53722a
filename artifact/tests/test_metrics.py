"""Metrics against hand-computed traces (dyadic times, so equalities are exact) and properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.metrics import (
    itl_gaps,
    output_agreement,
    percentiles,
    slo_compliance,
    summarize,
    ttft,
    ttft_from_send,
)

NAN = math.nan


def requests_frame(rows: list[tuple]) -> pd.DataFrame:
    cols = ["request_id", "arrival_s", "send_s", "first_token_s", "finish_s", "output_len",
            "status", "error"]
    df = pd.DataFrame(rows, columns=cols)
    df["prompt_len"] = 16
    df["output_len_requested"] = 4
    return df


def tokens_frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["request_id", "index", "t_s"])


# r1: four tokens, the middle two in one chunk -> events 0.5, 0.75, 1.25 -> gaps 0.25, 0.5.
# r2: a single token (TPOT 0). r3: failed, no first token, but stray tokens the client saw.
# r4: three one-token chunks, listed out of order -> gaps 0.1875, 0.1875.
REQUESTS = requests_frame([
    ("r1", 0.0, 0.0078125, 0.5, 1.25, 4, "ok", None),
    ("r2", 1.0, 1.0, 1.25, 1.25, 1, "ok", None),
    ("r3", 2.0, 2.0, NAN, NAN, 0, "failed", "connection reset"),
    ("r4", 0.5, 0.5, 0.625, 1.0, 3, "ok", None),
])
TOKENS = tokens_frame([
    ("r1", 0, 0.5), ("r1", 1, 0.75), ("r1", 2, 0.75), ("r1", 3, 1.25),
    ("r2", 0, 1.25),
    ("r3", 0, 2.5), ("r3", 1, 3.5),
    ("r4", 2, 1.0), ("r4", 0, 0.625), ("r4", 1, 0.8125),
])


def test_itl_collapses_chunks_and_sorts_by_index() -> None:
    ok_tokens = TOKENS[TOKENS["request_id"] != "r3"]
    assert sorted(itl_gaps(ok_tokens).tolist()) == [0.1875, 0.1875, 0.25, 0.5]
    assert itl_gaps(tokens_frame([("a", 0, 1.0), ("a", 1, 1.0)])).size == 0


def test_itl_refuses_broken_traces() -> None:
    with pytest.raises(ValueError, match="t_s decreases with index in request 'a'"):
        itl_gaps(tokens_frame([("a", 0, 2.0), ("a", 1, 1.0)]))
    with pytest.raises(ValueError, match="repeats index 0"):
        itl_gaps(tokens_frame([("a", 0, 1.0), ("a", 0, 2.0)]))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['t_s'\]"):
        itl_gaps(pd.DataFrame({"request_id": ["a"], "index": [0]}))


def test_ttft_from_arrival_and_from_send() -> None:
    assert ttft(REQUESTS).tolist() == [0.5, 0.25, 0.125]
    assert ttft_from_send(REQUESTS).tolist() == [0.4921875, 0.25, 0.125]


def test_ok_request_without_first_token_is_refused() -> None:
    broken = REQUESTS.copy()
    broken.loc[0, "first_token_s"] = NAN
    with pytest.raises(ValueError, match=r"first_token_s is NaN/inf for ok request\(s\) \['r1'\]"):
        ttft(broken)


def test_unknown_status_is_refused() -> None:
    broken = REQUESTS.copy()
    broken.loc[2, "status"] = "timeout"
    with pytest.raises(ValueError, match=r"status value\(s\) \['timeout'\] are invalid"):
        ttft(broken)


def test_percentiles_hand_values() -> None:
    p = percentiles([4.0, 1.0, 3.0, 2.0])
    assert p == pytest.approx({"p50": 2.5, "p90": 3.7, "p99": 3.97, "mean": 2.5, "max": 4.0})
    assert list(percentiles([1.0], ps=(99.9,))) == ["p99.9", "mean", "max"]
    assert all(math.isnan(v) for v in percentiles([]).values())
    with pytest.raises(ValueError, match="contains NaN"):
        percentiles([1.0, NAN])
    with pytest.raises(ValueError, match=r"ps=101 is invalid"):
        percentiles([1.0], ps=(101,))


def test_slo_compliance_counts_failures_and_bounds_are_inclusive() -> None:
    # TTFT 0.5, 0.25, 0.125 and TPOT 0.25, 0, 0.1875 for r1, r2, r4; r3 failed.
    assert slo_compliance(REQUESTS, 0.5, 0.25) == 0.75
    assert slo_compliance(REQUESTS, 0.4999, 0.25) == 0.5
    assert slo_compliance(REQUESTS, 0.5, 0.2) == 0.5
    assert slo_compliance(REQUESTS, math.inf, math.inf) == 0.75
    with pytest.raises(ValueError, match="ttft_slo_s=0 is invalid"):
        slo_compliance(REQUESTS, 0, 0.1)


def test_summarize() -> None:
    s = summarize(REQUESTS, TOKENS, ttft_slo_s=0.5, tpot_slo_s=0.25)
    assert (s["n_requests"], s["n_ok"], s["n_failed"], s["n_cancelled"]) == (4, 3, 1, 0)
    # The failed request's 1 s gap is excluded, as vllm bench serve keeps successful ones only.
    assert s["itl_p50_ms"] == 218.75 and s["itl_max_ms"] == 500.0
    assert s["itl_mean_ms"] == 281.25
    assert s["ttft_p50_ms"] == 250.0 and s["ttft_max_ms"] == 500.0
    assert s["slo_compliance"] == 0.75
    assert s["output_tokens"] == 8
    assert s["duration_s"] == 1.25  # first arrival 0.0 to last finish 1.25 (r3 never finished)
    assert s["output_throughput_tps"] == 6.4
    # Gaps 0.1875, 0.1875, 0.25, 0.5: one above the 0.3 s SLO, two above a 0.2 s target.
    s = summarize(REQUESTS, TOKENS, ttft_slo_s=0.5, tpot_slo_s=0.25, stall_s=0.3, long_gap_s=0.2)
    assert (s["stalls"], s["stall_share"], s["worst_gap_ms"], s["long_gap_share"]) == (1, 0.25, 500.0, 0.5)
    # Per-request mean gaps: r1 (0.25 + 0.5) / 2, r4 0.1875; r2 has none.
    assert s["itl_req_p99_ms"] == pytest.approx(1000 * (0.1875 + 0.99 * (0.375 - 0.1875)))


def test_output_agreement() -> None:
    a = {"r1": "0a", "r2": "1b", "r3": "2c"}
    b = {"r1": "0a", "r2": "1c", "r4": "0a"}
    assert output_agreement(a, b) == {"n_compared": 4, "n_identical": 1, "rate": 0.25,
                                      "mismatched": ["r2", "r3", "r4"]}
    assert math.isnan(output_agreement({}, {})["rate"])


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=50))
def test_percentiles_are_ordered(x) -> None:
    p = percentiles(x)
    eps = 1e-9 * (1 + max(abs(v) for v in x))
    assert p["p50"] <= p["p90"] + eps and p["p90"] <= p["p99"] + eps
    assert p["p99"] <= p["max"] + eps and min(x) - eps <= p["mean"] <= p["max"] + eps


chunked_request = st.lists(  # per chunk: (tokens in the chunk, gap before the chunk)
    st.tuples(st.integers(1, 3), st.floats(1e-3, 1.0)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(chunked_request, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_itl_gap_count_is_events_minus_one(requests, rnd) -> None:
    rows, expected = [], []
    for r, chunks in enumerate(requests):
        t, index = 0.0, 0
        for size, gap in chunks:
            t += gap
            rows += [(f"q{r}", index + k, t) for k in range(size)]
            index += size
        expected += [gap for _, gap in chunks[1:]]
    rnd.shuffle(rows)
    gaps = itl_gaps(tokens_frame(rows))
    assert gaps.size == len(expected) and np.all(gaps > 0)
    assert sorted(gaps) == pytest.approx(sorted(expected), abs=1e-9)


def test_summarize_names_a_missing_token_column() -> None:
    """Fuzz find: tokens without request_id raised a bare KeyError in summarize."""
    with pytest.raises(ValueError, match=r"tokens frame: missing column\(s\) \['request_id'\]"):
        summarize(REQUESTS, TOKENS.drop(columns=["request_id"]), ttft_slo_s=0.5, tpot_slo_s=0.25)
