"""The engine-core cost profile of a synchronous run (:mod:`dlfp.sim.enginefit`): on records built with known
costs it finds them, and the committed CPU run's profile is a valid one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dlfp.sim.costmodel import parse_engine_host
from dlfp.sim.enginefit import INPUT_US, engine_host_fit


def _run(n: int = 200, update_s: float = 0.0004, per_decode_s: float = 0.00002, output_s: float = 0.0011,
         seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A synchronous run's steps and tokens with known host costs around steps of random length."""
    rng = np.random.default_rng(seed)
    decodes = rng.integers(1, 30, n)
    span = rng.uniform(0.005, 0.02, n)
    schedule, complete, t = [], [], 0.0
    for k in range(n):
        schedule.append(t)
        t += span[k]
        complete.append(t)
        t += update_s + per_decode_s * decodes[k]
    steps = pd.DataFrame({"schedule_t": schedule, "complete_t": complete, "decode_reqs": decodes,
                          "prefill_tokens": 0})
    tokens = pd.DataFrame({"t_s": np.asarray(complete) + update_s + output_s})
    return steps, tokens


def test_known_costs_are_found() -> None:
    steps, tokens = _run()
    raw = engine_host_fit([steps], [tokens], "x", "a test run")
    host = parse_engine_host(raw)
    assert host.update_us == pytest.approx(400, rel=0.02) and host.update_request_us == pytest.approx(20, rel=0.05)
    median_update = float(np.median(0.0004 + 0.00002 * steps.decode_reqs[:-1]))
    assert host.output_us == pytest.approx((0.0004 + 0.0011 - median_update) * 1e6, rel=0.02)
    assert host.input_us == INPUT_US and raw["engine"]["input_us"]["source"] == "assumed"
    assert raw["engine"]["update_us"]["source"] == "measured" and "a test run" in raw["references"][0]


def test_too_few_records_are_refused() -> None:
    steps, tokens = _run(n=5)
    with pytest.raises(ValueError, match="too few to measure"):
        engine_host_fit([steps], [tokens], "x", "y")
