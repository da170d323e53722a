"""Import of ``vllm bench serve`` detailed results, against a hand-written file (dyadic times, exact)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dlfp.analysis.bench_serve import load_bench_json
from dlfp.metrics import itl_gaps

NAN = math.nan


def bench_result(failed_ttft: float | None = 0.0) -> dict[str, Any]:
    """b0: ok, three ITLs (one chunk carries two tokens); b1: failed; b2: ok, one ITL.

    start_times have an arbitrary perf_counter origin; b1 was sent first, so it is time 0.
    """
    return {
        "date": "20250101-120000", "model_id": "facebook/opt-125m", "request_rate": 4.0,
        "burstiness": 1.0, "max_concurrency": None, "duration": 2.5, "completed": 2, "failed": 1,
        "input_lens": [32, 16, 8],
        "output_lens": [5, 0, 2],
        "ttfts": [0.25, failed_ttft, 0.5],
        "itls": [[0.125, 0.25, 0.5], [], [0.25]],
        "latencies": [1.125, 0.0, 0.75],
        "start_times": [100.5, 100.0, 101.25],
        "generated_texts": ["a bc d e", "", "x y"],
        "errors": ["", "Internal Server Error", ""],
    }


def write(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("failed_ttft", [0.0, None])
def test_frames_exact(tmp_path: Path, failed_ttft: float | None) -> None:
    requests, tokens, meta = load_bench_json(write(tmp_path, bench_result(failed_ttft)))
    expected_requests = pd.DataFrame({
        "request_id": ["b0000", "b0001", "b0002"],
        "arrival_s": [0.5, 0.0, 1.25],
        "send_s": [0.5, 0.0, 1.25],
        "first_token_s": [0.75, NAN, 1.75],
        "finish_s": [1.625, NAN, 2.0],
        "prompt_len": [32, 16, 8],
        "output_len_requested": [5, 0, 2],
        "output_len": [5, 0, 2],
        "status": ["ok", "failed", "ok"],
        "error": [None, "Internal Server Error", None],
    })
    pd.testing.assert_frame_equal(requests, expected_requests)
    expected_tokens = pd.DataFrame({
        "request_id": ["b0000"] * 4 + ["b0002"] * 2,
        "index": [0, 1, 2, 3, 0, 1],
        "t_s": [0.75, 0.875, 1.125, 1.625, 1.75, 2.0],
    })
    pd.testing.assert_frame_equal(tokens, expected_tokens)
    assert meta == {"date": "20250101-120000", "model_id": "facebook/opt-125m", "request_rate": 4.0,
                    "burstiness": 1.0, "max_concurrency": None, "duration": 2.5, "completed": 2,
                    "failed": 1, "source": "vllm bench serve"}


def test_itl_from_chunk_rows_equals_vllm_itls(tmp_path: Path) -> None:
    _, tokens, _ = load_bench_json(write(tmp_path, bench_result()))
    np.testing.assert_array_equal(itl_gaps(tokens), [0.125, 0.25, 0.5, 0.25])


def test_missing_start_times_is_named(tmp_path: Path) -> None:
    raw = bench_result()
    del raw["start_times"]
    with pytest.raises(ValueError, match="'start_times' is missing"):
        load_bench_json(write(tmp_path, raw))


def test_mismatched_lengths_name_the_field(tmp_path: Path) -> None:
    raw = bench_result()
    raw["errors"] = ["", ""]
    with pytest.raises(ValueError, match="'errors' has 2 entries but start_times has 3"):
        load_bench_json(write(tmp_path, raw))


@pytest.mark.parametrize(("field", "index", "value"), [
    ("ttfts", 0, -0.25),
    ("itls", 2, [0.25, -0.125]),
    ("start_times", 1, None),
])
def test_bad_times_are_named(tmp_path: Path, field: str, index: int, value: Any) -> None:
    raw = bench_result()
    raw[field][index] = value
    with pytest.raises(ValueError, match=rf"{field}\[{index}\]"):
        load_bench_json(write(tmp_path, raw))


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text("[]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_bench_json(path)
