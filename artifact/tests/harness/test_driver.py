"""The open-loop client (:mod:`dlfp.harness.driver`): each request is sent at its arrival time,
whatever is still in flight; every delivered token is stamped with the client's clock; a failed
request is recorded with its error and partial output, never dropped, and never stops the others.

The target is an in-process token source, as in :mod:`dlfp.bench.driver_fidelity`: no engine.
Timing bounds are generous (a shared, loaded machine): sends may be up to 50 ms late, far less
than a closed loop would delay them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import numpy as np
import pandas as pd
import pytest

from dlfp.harness.driver import RequestTrace, drive, output_digest, stamp
from dlfp.harness.workload import Request
from dlfp.trials.runfolder import check_schema

LATE_S = 0.050


def req(i: int, arrival_s: float, output_len: int = 3, prompt_len: int = 4) -> Request:
    return Request(f"r{i}", i, "c", arrival_s, tuple(range(10, 10 + prompt_len)), output_len)


class SlowTarget:
    """Streams ``output_len`` tokens ``gap_s`` apart, in deliveries of ``per_delivery`` ids; a request
    whose id is in ``fail`` raises after ``fail_after`` tokens. Records when each stream began."""

    def __init__(self, gap_s: float = 0.01, per_delivery: int = 1, fail: frozenset[str] = frozenset(),
                 fail_after: int = 1) -> None:
        self.gap_s, self.per_delivery, self.fail, self.fail_after = gap_s, per_delivery, fail, fail_after
        self.started: list[str] = []
        self.in_flight = self.max_in_flight = 0

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        self.started.append(request.request_id)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            sent = 0
            while sent < request.output_len:
                await asyncio.sleep(self.gap_s)
                if request.request_id in self.fail and sent >= self.fail_after:
                    raise RuntimeError(f"engine refused {request.request_id}")
                ids = [100 * request.index + sent + j
                       for j in range(min(self.per_delivery, request.output_len - sent))]
                sent += len(ids)
                yield ids
        finally:
            self.in_flight -= 1


def run(target: SlowTarget, requests: list[Request], progress=None):
    return asyncio.run(drive(target, requests, progress))


def test_requests_are_sent_at_their_arrival_times_not_after_completions() -> None:
    # Each request takes >= 450 ms; they arrive 100 ms apart: a closed loop would send the second at 450 ms.
    target = SlowTarget(gap_s=0.15)
    requests = [req(i, 0.1 * i) for i in range(4)]
    trace = run(target, requests)
    df = trace.requests.set_index("request_id")
    for r in requests:
        assert r.arrival_s <= df.loc[r.request_id, "send_s"] < r.arrival_s + LATE_S
    assert target.max_in_flight == 4  # all four in flight at once
    assert df.loc["r3", "send_s"] < df.loc["r0", "finish_s"]
    assert len(trace.lateness_s) == 4 and all(0 <= x < LATE_S for x in trace.lateness_s)


def test_requests_are_replayed_in_arrival_order_whatever_the_input_order() -> None:
    target = SlowTarget(gap_s=0.001)
    trace = run(target, [req(2, 0.04), req(0, 0.0), req(1, 0.02)])
    assert target.started == ["r0", "r1", "r2"]
    assert list(trace.requests.request_id) == ["r0", "r1", "r2"]
    assert list(trace.requests.arrival_s) == [0.0, 0.02, 0.04]


def test_every_token_is_stamped_on_delivery() -> None:
    target = SlowTarget(gap_s=0.02, per_delivery=2)
    trace = run(target, [req(0, 0.0, output_len=5), req(1, 0.01, output_len=1)])
    tok = trace.tokens
    r0 = tok[tok.request_id == "r0"]
    assert list(r0["index"]) == [0, 1, 2, 3, 4] and list(r0.token_id) == [0, 1, 2, 3, 4]
    t = list(r0.t_s)
    assert t[0] == t[1] and t[2] == t[3] and t[1] < t[2] < t[4]  # one stamp per delivery of two ids
    assert t[2] - t[0] >= 0.015 and t[4] - t[2] >= 0.015  # deliveries ~20 ms apart
    reqs = trace.requests.set_index("request_id")
    assert reqs.loc["r0", "first_token_s"] == t[0] and reqs.loc["r0", "send_s"] <= t[0] <= reqs.loc["r0", "finish_s"]
    assert (reqs.loc["r0", "output_len"], reqs.loc["r0", "output_len_requested"], reqs.loc["r0", "prompt_len"]) == (
        5, 5, 4)
    assert list(tok[tok.request_id == "r1"].token_id) == [100]
    assert (reqs.status == "ok").all() and reqs.error.isna().all()


def test_token_times_are_microsecond_stamps_and_each_output_has_its_digest() -> None:
    trace = run(SlowTarget(gap_s=0.003), [req(0, 0.0, output_len=3), req(1, 0.001, output_len=3)])
    assert all(t == round(t * 1e6) / 1e6 for t in trace.tokens.t_s)
    ids = trace.tokens.groupby("request_id").token_id.apply(list)
    digests = trace.requests.set_index("request_id").output_digest
    assert [digests[r] for r in ("r0", "r1")] == [output_digest(ids[r]) for r in ("r0", "r1")]
    assert len(digests["r0"]) == 16 and digests["r0"] != digests["r1"]


def test_an_output_digest_tells_outputs_apart_by_value_and_order() -> None:
    assert output_digest([1, 2, 3]) == output_digest(np.array([1, 2, 3], dtype=np.int64))
    assert len({output_digest(x) for x in ([1, 2, 3], [3, 2, 1], [1, 2], [], [1, 2, 3, 0])}) == 5
    assert stamp(0.1234564) == 0.123456 and stamp(0.1234566) == 0.123457


def test_a_failed_request_is_recorded_and_the_others_finish() -> None:
    target = SlowTarget(gap_s=0.01, fail=frozenset({"r1"}), fail_after=2)
    trace = run(target, [req(i, 0.01 * i, output_len=4) for i in range(3)])
    reqs = trace.requests.set_index("request_id")
    assert list(reqs.status) == ["ok", "failed", "ok"]
    assert reqs.loc["r1", "error"] == "RuntimeError: engine refused r1"
    assert reqs.loc["r1", "output_len"] == 2 and list(trace.tokens[trace.tokens.request_id == "r1"]["index"]) == [0, 1]
    assert reqs.loc["r1", "send_s"] <= reqs.loc["r1", "finish_s"] and not math.isnan(reqs.loc["r1", "finish_s"])
    assert list(reqs.output_len) == [4, 2, 4] and len(trace.requests) == 3


def test_a_request_failing_before_any_token_has_no_first_token() -> None:
    target = SlowTarget(gap_s=0.001, fail=frozenset({"r0"}), fail_after=0)
    trace = run(target, [req(0, 0.0)])
    row = trace.requests.iloc[0]
    assert row.status == "failed" and row.output_len == 0 and math.isnan(row.first_token_s)
    assert trace.tokens.empty and list(trace.tokens.columns) == ["request_id", "index", "t_s", "token_id"]


def test_progress_hears_the_start_then_each_request() -> None:
    calls: list[int] = []
    run(SlowTarget(gap_s=0.001), [req(i, 0.005 * i) for i in range(5)], progress=calls.append)
    assert calls == [0] + [1] * 5


def test_traces_are_the_tables_the_run_folder_expects(tmp_path) -> None:
    trace = run(SlowTarget(gap_s=0.001, fail=frozenset({"r1"})), [req(i, 0.002 * i) for i in range(3)])
    check_schema(trace.requests, "requests", tmp_path / "requests.parquet")
    check_schema(trace.tokens, "tokens", tmp_path / "tokens.parquet")
    assert isinstance(trace.t0_monotonic, float)


def test_an_unsent_request_says_so() -> None:
    trace = RequestTrace(req(0, 1.0))
    assert (trace.status, trace.error) == ("cancelled", "not sent") and math.isnan(trace.send_s)


def test_cancelling_the_replay_cancels_the_requests_in_flight() -> None:
    target = SlowTarget(gap_s=0.05)

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(drive(target, [req(0, 0.0, output_len=100), req(1, 0.0, output_len=100)]), 0.2)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert target.started == ["r0", "r1"] and target.in_flight == 0  # both streams were closed


def test_empty_workload_gives_empty_tables() -> None:
    trace = run(SlowTarget(), [])
    assert trace.requests.empty and trace.tokens.empty and trace.lateness_s == []
    assert isinstance(trace.tokens, pd.DataFrame)
