"""``dlfp bench reuse`` (``dlfp.bench.reuse``): the interval it judges engine reuse by, and its report.

The benchmark itself starts engines (minutes); it is a command, run for the notes, not a test."""

from __future__ import annotations

import math

import pytest

from dlfp.bench.reuse import report, welch


def test_welch_interval_of_the_difference() -> None:
    lo, hi = welch([10.0, 11.0, 12.0], [10.0, 11.0, 12.0])
    assert lo < 0 < hi and lo == pytest.approx(-hi)
    lo, hi = welch([10.0, 10.1, 9.9], [20.0, 20.1, 19.9])
    assert 9.5 < lo < 10 < hi < 10.5
    assert all(math.isnan(x) for x in welch([1.0], [1.0, 2.0]))


def test_report_names_each_metric_with_every_condition_and_both_intervals() -> None:
    sample = {"itl_p99_ms": 10.0, "ttft_p99_ms": 20.0, "itl_p50_ms": 5.0}
    lines = report({"target": "t", "requests": 12, "rate_rps": 3.0,
                    "cold": [sample, {k: v + 1 for k, v in sample.items()}], "warm": [sample, sample],
                    "reused": [sample, sample]})
    assert lines[0].startswith("t: 12 requests at 3 req/s, 2 replays each: cold")
    assert lines[1].startswith("  itl_p99_ms: cold 10.50 (sd 0.50), warm 10.00 (sd 0.00), reused 10.00")
    assert "warm - cold 95% CI" in lines[1] and "reused - warm 95% CI [0.00, 0.00]" in lines[1] and len(lines) == 4
