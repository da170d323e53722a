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
    tokens = pd.DataFrame({"t_s": np.asarray(complete) + update_s + per_decode_s * decodes + output_s})
    return steps, tokens


def test_known_costs_are_found() -> None:
    steps, tokens = _run()
    raw = engine_host_fit([steps], [tokens], "x", "a test run")
    host = parse_engine_host(raw)
    assert host.update_us == pytest.approx(400, rel=0.02) and host.update_request_us == pytest.approx(20, rel=0.05)
    assert host.output_us == pytest.approx(1100, rel=0.02) and host.output_request_us < 0.1
    assert host.input_us == INPUT_US and raw["engine"]["input_us"]["source"] == "assumed"
    assert raw["engine"]["update_us"]["source"] == "measured" and "a test run" in raw["references"][0]


def test_too_few_records_are_refused() -> None:
    steps, tokens = _run(n=5)
    with pytest.raises(ValueError, match="too few to measure"):
        engine_host_fit([steps], [tokens], "x", "y")


def _async_run(n: int = 400, sched_s: float = 0.0003, per_req_s: float = 0.00002, update_s: float = 0.0002,
               output_s: float = 0.0009, gpu_s: float = 0.0005, seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """An async engine core's records, played by the rules of vLLM's batch queue with known costs: schedule
    k+1, the model runner's host time (the profile's), wait for k on the stream, update k."""
    from dlfp.sim.costmodel import load_profile

    device = load_profile("a100")
    rng = np.random.default_rng(seed)
    reqs = rng.integers(5, 60, n + 1)
    host = (device.host_step_us + device.host_request_us * reqs) * 1e-6
    gpu = gpu_s * rng.uniform(0.5, 3.0, n + 1)  # sometimes the stream is slower than the host: waits
    rows, t, stream_free = [], 0.0, 0.0
    sched_t, done_t = [0.0] * (n + 1), [0.0] * (n + 1)
    sched_t[0] = 0.0
    t = sched_s + per_req_s * reqs[0] + host[0]
    stream_free = done_t[0] = t + gpu[0]
    for k in range(n):
        sched_t[k + 1] = t
        t += sched_s + per_req_s * reqs[k + 1] + host[k + 1]
        start = max(t, stream_free)
        stream_free = done_t[k + 1] = start + gpu[k + 1]
        t = max(t, done_t[k])  # wait for k
        rows.append({"step": k, "schedule_t": sched_t[k], "complete_t": t, "exec_done_t": done_t[k],
                     "decode_reqs": int(reqs[k]), "prefill_tokens": 0, "total_tokens": int(reqs[k])})
        t += update_s + 0.00001 * reqs[k]
    steps = pd.DataFrame(rows)
    tokens = pd.DataFrame({"t_s": steps.complete_t + 0.00001 * steps.decode_reqs + update_s + output_s})
    return steps, tokens


def test_an_async_run_s_schedule_update_and_output_are_found() -> None:
    from dlfp.sim.costmodel import load_engine_host, load_profile
    from dlfp.sim.enginefit import engine_host_fit_async

    steps, tokens = _async_run()
    raw = engine_host_fit_async([steps], [tokens], load_profile("a100"), "x", "a test run",
                                load_engine_host("gpu-node"), "gpu-node")
    host = parse_engine_host(raw)
    assert host.schedule_us == pytest.approx(300, rel=0.05) and host.schedule_request_us == pytest.approx(20, rel=0.05)
    assert host.update_us == pytest.approx(200, rel=0.05) and host.update_request_us == pytest.approx(10, rel=0.1)
    assert host.output_us == pytest.approx(900, rel=0.05)
    assert raw["engine"]["schedule_us"]["source"] == "measured" and raw["engine"]["input_us"]["source"] == "assumed"


def test_a_host_that_always_waited_takes_the_fallback_schedule_and_says_so() -> None:
    from dlfp.sim.costmodel import load_engine_host, load_profile
    from dlfp.sim.enginefit import engine_host_fit_async

    steps, tokens = _async_run(gpu_s=0.02)  # the stream is always far slower than the host
    node = load_engine_host("gpu-node")
    raw = engine_host_fit_async([steps], [tokens], load_profile("a100"), "x", "y", node, "gpu-node")
    assert parse_engine_host(raw).schedule_us == pytest.approx(node.schedule_us)
    assert raw["engine"]["schedule_us"]["source"] == "assumed" and "never visible" in raw["references"][0]
