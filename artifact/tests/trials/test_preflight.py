"""The pre-flight's parts that need no engine (:mod:`dlfp.trials.preflight`).

``fit``: the decode step is the median cadence of decode-only steps that follow a decode-only step
with every decoder running (robust to outliers, blind to steps that are not that), each probe size's
excess is the median of its mixed steps, the cost line falls back to one through the origin when noise
makes its intercept negative, and too few or meaningless records are refused with the reason
(``tests/trials/test_design.py`` checks that a noiseless engine is recovered exactly).
``_probe``: closed loop against any target: ``decoders`` requests decode throughout, each probe size
is prefilled ``REPEATS`` times one at a time with ``SETTLE_TOKENS`` of decoding in between, and the
decoders are cancelled at the end. No engine is started here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.harness.workload import MIN_TOKEN_ID, Request
from dlfp.trials import preflight
from dlfp.trials.preflight import DECODER_PROMPT, REPEATS, SETTLE_TOKENS, WARM_TOKENS, fit

SIZES = (160, 320, 640)


class Steps:
    """Step records whose cadence (time between consecutive completions) is what each row says."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.t = 0.0

    def add(self, duration: float, prefill: int = 0, decodes: int = 4, n: int = 1) -> Steps:
        for _ in range(n):
            self.t += duration
            self.rows.append({"step": len(self.rows), "schedule_t": self.t - duration, "complete_t": self.t,
                              "prefill_tokens": prefill, "decode_reqs": decodes})
        return self

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


def engine(d: float, a: float, b: float, sizes: tuple[int, ...] = SIZES, decoders: int = 4) -> Steps:
    """A noiseless engine: decode steps of ``d``, a probe of ``n`` tokens adds ``a + b n``."""
    s = Steps().add(d, decodes=decoders, n=8)
    for n in sizes:
        for _ in range(REPEATS):
            s.add(d + a + b * n, prefill=n, decodes=decoders).add(d, decodes=decoders, n=3)
    return s


def test_the_measurement_carries_its_decoders_and_source() -> None:
    m = fit(engine(0.007, 0.005, 1e-4).frame(), SIZES, 4, "preflight on test")
    assert (m.decoders, m.source) == (4, "preflight on test")


def test_row_order_does_not_matter() -> None:
    df = engine(0.009, 0.002, 5e-5).frame()
    shuffled = df.sample(frac=1.0, random_state=3)
    assert fit(shuffled, SIZES, 4, "s") == fit(df, SIZES, 4, "s")


def test_the_decode_step_ignores_steps_that_are_not_steady_decoding() -> None:
    d = 0.007
    s = Steps().add(d, n=7)  # six plain decode-only cadences (the first step has none)
    s.add(0.5 * d, decodes=3, n=20)  # fewer decoders than the pre-flight runs: not the decode step
    s.add(d, decodes=4, n=1)  # the first after them does not follow a full decode-only step either
    for n in SIZES * REPEATS:
        s.add(d + 0.005 + 1e-4 * n, prefill=n).add(3 * d)  # the cadence right after a mixed step is skipped
    s.add(0.0, n=8)  # zero cadences (steps completing together) are not steps
    m = fit(s.frame(), SIZES, 4, "s")
    assert m.decode_s == pytest.approx(d)


def test_the_decode_step_is_a_median_and_outliers_do_not_move_it() -> None:
    s = engine(0.007, 0.005, 1e-4)
    s.add(0.200, n=2).add(0.001, n=1)  # a page fault, a scheduler hiccup
    m = fit(s.frame(), SIZES, 4, "s")
    assert m.decode_s == pytest.approx(0.007)
    assert m.prefill_fixed_s == pytest.approx(0.005, abs=1e-9) and m.prefill_per_token_s == pytest.approx(1e-4)


def test_mixed_steps_count_with_one_decoder_fewer_but_not_two() -> None:
    s = Steps().add(0.007, n=8)
    for n in SIZES:
        s.add(0.007 + 0.004 + 2e-4 * n, prefill=n, decodes=3).add(0.007, n=2)  # the prefill's request: decoders - 1
        s.add(1.0, prefill=n, decodes=2).add(0.007, n=2)  # fewer: not a probe of the engine's state
    m = fit(s.frame(), SIZES, 4, "s")
    assert m.prefill_fixed_s == pytest.approx(0.004, abs=1e-9) and m.prefill_per_token_s == pytest.approx(2e-4)


def test_pending_steps_without_a_completion_are_ignored() -> None:
    df = engine(0.007, 0.005, 1e-4).frame()
    pending = pd.DataFrame([{"step": len(df) + i, "schedule_t": 9.0, "complete_t": None, "prefill_tokens": 640,
                             "decode_reqs": 4} for i in range(3)])
    m = fit(pd.concat([df, pending], ignore_index=True), SIZES, 4, "s")
    assert m.prefill_per_token_s == pytest.approx(1e-4) and m.decode_s == pytest.approx(0.007)


def test_each_probe_size_is_its_median_mixed_step() -> None:
    s = Steps().add(0.010, n=8)
    for n, excesses in zip(SIZES, ([0.025, 0.025, 0.5], [0.04, 0.04, 0.0001], [0.07, 0.09, 0.07]), strict=True):
        for e in excesses:
            s.add(0.010 + e, prefill=n).add(0.010, n=2)
    m = fit(s.frame(), SIZES, 4, "s")
    b, a = np.polyfit(SIZES, [0.025, 0.04, 0.07], 1)
    assert a > 0.005 and m.prefill_per_token_s == pytest.approx(b) and m.prefill_fixed_s == pytest.approx(a)


def test_a_negative_intercept_falls_back_to_a_line_through_the_origin() -> None:
    s = Steps().add(0.007, n=8)
    excess = {160: 0.010, 320: 0.030, 640: 0.070}  # slope 1.25e-4/token, intercept -0.01 s: noise
    for n in SIZES:
        s.add(0.007 + excess[n], prefill=n).add(0.007, n=2)
    m = fit(s.frame(), SIZES, 4, "s")
    xs, ys = np.array(SIZES, float), np.array([excess[n] for n in SIZES])
    assert m.prefill_fixed_s == 0.0
    assert m.prefill_per_token_s == pytest.approx(float(xs @ ys / (xs @ xs)))


def test_prefill_that_makes_steps_shorter_is_refused_as_noise() -> None:
    s = Steps().add(0.007, n=8)
    for n in SIZES:
        s.add(0.006, prefill=n).add(0.007, n=2)
    with pytest.raises(RuntimeError, match=r"prefill made steps no longer .*rerun on a quieter machine"):
        fit(s.frame(), SIZES, 4, "s")


def test_probe_sizes_that_never_ran_are_refused_with_the_count() -> None:
    df = engine(0.007, 0.005, 1e-4, sizes=(160,)).frame()
    with pytest.raises(RuntimeError, match=r"mixed steps of only 1 probe size\(s\) \(160, 320, 640\)"):
        fit(df, SIZES, 4, "s")


def test_too_few_decode_only_steps_are_refused_with_the_count() -> None:
    s = Steps().add(0.007, n=5)  # four plain cadences: one short of five
    for n in SIZES:
        s.add(0.007 + 0.005 + 1e-4 * n, prefill=n)
    with pytest.raises(RuntimeError, match="only 4 decode-only steps were recorded"):
        fit(s.frame(), SIZES, 4, "s")
    s = Steps().add(0.007, decodes=3, n=50)  # many, but not with every decoder running
    with pytest.raises(RuntimeError, match="only 0 decode-only steps"):
        fit(s.frame(), SIZES, 4, "s")


@settings(max_examples=100, deadline=None)
@given(d=st.floats(1e-4, 0.1), a=st.floats(0.0, 0.05), b=st.floats(1e-7, 1e-3),
       decoders=st.integers(1, 16), seed=st.integers(0, 2 ** 16))
def test_any_noiseless_engine_is_recovered_from_shuffled_records(d: float, a: float, b: float, decoders: int,
                                                                 seed: int) -> None:
    df = engine(d, a, b, decoders=decoders).frame().sample(frac=1.0, random_state=seed)
    m = fit(df, SIZES, decoders, "h")
    assert m.decode_s == pytest.approx(d, rel=1e-6)
    assert m.prefill_per_token_s == pytest.approx(b, rel=1e-4)
    assert m.prefill_fixed_s == pytest.approx(a, rel=1e-4, abs=1e-9)
    assert m.mixed_step_s(500) == pytest.approx(d + a + 500 * b, rel=1e-5)


# --- prompts and the closed-loop probe ---------------------------------------------------------------


def test_prompts_are_deterministic_and_avoid_special_ids() -> None:
    p = preflight._prompt(3, 500, 64)
    assert len(p) == 500 and p == preflight._prompt(3, 500, 64) and p != preflight._prompt(4, 500, 64)
    assert min(p) >= MIN_TOKEN_ID and max(p) < 64 - 1
    assert len(set(p)) > 10


class FakeTarget:
    """Decoders stream a token per millisecond until ``decode_limit``; a prefill takes 2 ms and returns
    one token. Records what the probe asked for and what the decoders had received at each prefill."""

    def __init__(self, decode_limit: int = 10 ** 6, fail_after_await: bool = False) -> None:
        self.decode_limit, self.fail_after_await = decode_limit, fail_after_await
        self.decoders: list[Request] = []
        self.prefills: list[Request] = []
        self.counts: dict[str, int] = {}
        self.at_prefill: list[int] = []
        self.in_flight = self.max_in_flight = 0
        self.closed: list[str] = []

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        if request.request_id.startswith("pf-decode"):
            self.decoders.append(request)
            self.counts[request.request_id] = 0
            try:
                for i in range(self.decode_limit):
                    await asyncio.sleep(0.001)
                    self.counts[request.request_id] += 1
                    yield [MIN_TOKEN_ID + i % 7]
                if self.fail_after_await:  # a stream that learns it ended only at its next await
                    await asyncio.sleep(0.001)
                    raise RuntimeError("request aborted by the engine")
            finally:
                self.closed.append(request.request_id)
        else:
            self.prefills.append(request)
            self.at_prefill.append(min(self.counts.values()))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(0.002)
                yield [MIN_TOKEN_ID]
            finally:
                self.in_flight -= 1


@pytest.fixture
def no_flush_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "FLUSH_AFTER_S", 0.0)  # no step log to wait for here


def probe(target: FakeTarget, decoders: int = 3, timeout_s: float = 10.0) -> None:
    asyncio.run(asyncio.wait_for(preflight._probe(target, (10, 20), decoders, 1000, 256), timeout_s))


@pytest.mark.usefixtures("no_flush_wait")
def test_probe_prefills_each_size_repeatedly_one_at_a_time_while_decoding() -> None:
    target = FakeTarget()
    probe(target)
    assert [r.prompt_len for r in target.prefills] == [10] * REPEATS + [20] * REPEATS
    assert all(r.output_len == 1 for r in target.prefills) and target.max_in_flight == 1
    assert [r.request_id for r in target.decoders] == ["pf-decode-0", "pf-decode-1", "pf-decode-2"]
    assert all(r.prompt_len == DECODER_PROMPT and r.output_len == 256 - DECODER_PROMPT - 1 for r in target.decoders)
    ids = [r.request_id for r in target.decoders + target.prefills]
    assert len(set(ids)) == len(ids)
    assert all(min(r.prompt_token_ids) >= MIN_TOKEN_ID and max(r.prompt_token_ids) < 999
               for r in target.decoders + target.prefills)
    # Warm decoding before the first probe, and SETTLE_TOKENS of it between two probes.
    assert target.at_prefill[0] >= WARM_TOKENS
    assert all(b - a >= SETTLE_TOKENS for a, b in zip(target.at_prefill, target.at_prefill[1:], strict=False))
    assert sorted(target.closed) == ["pf-decode-0", "pf-decode-1", "pf-decode-2"]  # cancelled at the end


@pytest.mark.usefixtures("no_flush_wait")
def test_probe_refuses_decoders_that_end_too_soon() -> None:
    target = FakeTarget(decode_limit=WARM_TOKENS + SETTLE_TOKENS // 2)
    with pytest.raises(RuntimeError, match="pre-flight decoders ended before the probes were done"):
        probe(target)
    assert len(target.prefills) == 1


@pytest.mark.usefixtures("no_flush_wait")
def test_probe_refuses_decoders_that_fail_after_an_await() -> None:
    target = FakeTarget(decode_limit=WARM_TOKENS + SETTLE_TOKENS // 2, fail_after_await=True)
    with pytest.raises(RuntimeError, match="pre-flight decoders ended before the probes were done"):
        probe(target, timeout_s=1.0)
