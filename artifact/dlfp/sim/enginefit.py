"""The engine-core cost profile of a run whose engine core ran for real: what virtual time charges for it.

Two kinds of run show those costs in their records (a step's ``schedule_t``, when ``schedule()`` began;
``complete_t``, when ``update_from_output`` began; ``exec_done_t``, when its output existed; each token's
client time):

* a measured **synchronous** run (the CPU engine: :func:`engine_host_fit`), whose fitted step spans
  (:mod:`dlfp.sim.stepfit`) hold ``schedule()`` and the forward pass; what lies between spans is the
  update and the loop, and after them the output path;
* a **real-time modeled** run under async scheduling (:func:`engine_host_fit_async`): there the engine core
  schedules step k+1, spends the model runner's host time for it (the device profile's, known), then waits
  for step k's output and updates it. Where that output was ready before the engine asked (its stamp before
  the collection), nothing was waited for, and the span from ``schedule_t[k+1]`` to ``complete_t[k]`` is
  ``schedule()`` plus that host time; from ``complete_t[k]`` to ``schedule_t[k+2]`` is the update and the loop.

Each cost is fitted as a fixed part plus a part per request of the step, through the medians of
request-count bins (least squares weighted by the bins' sizes, non-negative): a 2-core machine's engine
thread is preempted now and then, and a median per bin does not follow those outliers. The output path is
a line too: the time, over tokens, from the last collection before each to the token, against that
step's requests, less the update's line. A new request's input path is not in the records: assumed as ``gpu-node``'s.
Pure: step and token tables in, an engine-core profile mapping out (:func:`dlfp.sim.costmodel.parse_engine_host`
reads it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from dlfp.sim.costmodel import EngineHost, Profile, engine_section

IN_SPAN_US = 1.0
"""The ``schedule()`` terms of an engine section fitted from synchronous step spans: the span starts at
``schedule()``, so its cost is already in the fitted step time; a token microsecond (values are positive)."""
INPUT_US = 150.0
"""A fitted engine section's input path, which step records do not show: the shipped profiles' assumption."""
BINS = 10
"""Request-count bins of the robust line fit."""
MIN_POINTS = 10
MIN_SCHEDULE_POINTS = 200
"""Fewest steps that show ``schedule()`` (scheduled while their predecessor's output was already there) for
a real-time run's schedule line: fewer are the odd steps of a host that waits on the stream, outliers."""


def robust_line(requests: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(fixed, per request) seconds through the medians of ``requests`` bins (module docstring), both >= 0."""
    if seconds.size < MIN_POINTS:
        raise ValueError(f"{seconds.size} samples: too few to measure an engine-core cost")
    edges = np.unique(np.quantile(requests, np.linspace(0, 1, BINS + 1)))
    which = np.clip(np.searchsorted(edges, requests, side="right") - 1, 0, max(len(edges) - 2, 0))
    xs, ys, ws = [], [], []
    for b in np.unique(which):
        mine = which == b
        xs.append(float(np.median(requests[mine])))
        ys.append(float(np.median(seconds[mine])))
        ws.append(np.sqrt(mine.sum()))
    x, y, w = np.asarray(xs), np.asarray(ys), np.asarray(ws)
    coef, _ = nnls(np.stack([np.ones_like(x), x], axis=1) * w[:, None], y * w)
    return float(coef[0]), float(coef[1])


def _output_delays(steps: pd.DataFrame, tokens: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per token: the time since the last collection before it, and that step's requests."""
    s = steps.dropna(subset=["complete_t"]).sort_values("complete_t")
    done = s["complete_t"].to_numpy(dtype=float)
    requests = (s["decode_reqs"] + (s["prefill_tokens"] > 0)).to_numpy(dtype=float)
    t = tokens["t_s"].to_numpy(dtype=float)
    i = np.searchsorted(done, t, side="right") - 1
    return t[i >= 0] - done[i[i >= 0]], requests[i[i >= 0]]


def _output(delays: Sequence[tuple[np.ndarray, np.ndarray]], update: tuple[float, float]) -> tuple[float, float]:
    """The output path's line: the tokens' delay after their step's collection, less the update's line."""
    delay = np.concatenate([d for d, _ in delays])
    if delay.size < MIN_POINTS:
        raise ValueError(f"{delay.size} tokens: too few to measure the engine's output path")
    fixed, per = robust_line(np.concatenate([r for _, r in delays]), delay)
    return fixed - update[0], per - update[1]


def _profile(name: str, origin: str, method: str, host: EngineHost, assumed: Sequence[str],
             evidence: str) -> dict[str, Any]:
    section = engine_section(host, "measured")
    for key in assumed:
        section[key]["source"] = "assumed"
    return {"name": name, "description": f"engine-core costs of {origin}, fitted from its step records and client "
            f"tokens ({method})", "references": [evidence], "engine": section}


def _host(schedule: tuple[float, float], update: tuple[float, float], output: tuple[float, float]) -> EngineHost:
    """Seconds to a profile's microseconds; a term the fit puts at or below zero becomes a token 1e-3 us (every
    value of a profile is positive)."""
    us = [max(v * 1e6, 1e-3) for v in (*schedule, *update, *output)]
    return EngineHost(schedule_us=max(us[0], IN_SPAN_US), schedule_request_us=us[1], update_us=us[2],
                      update_request_us=us[3], output_us=us[4], output_request_us=us[5], input_us=INPUT_US)


def engine_host_fit(steps: Sequence[pd.DataFrame], tokens: Sequence[pd.DataFrame], name: str,
                    origin: str) -> dict[str, Any]:
    """The engine-core profile of a measured synchronous run (module docstring): the update from the busy gap
    between a step's collection and the next ``schedule()`` (a step followed by one with decodes: the engine
    did not wait for an arrival); ``schedule()`` inside the fitted span (:data:`IN_SPAN_US`)."""
    gaps, reqs, delays = [], [], []
    for st, tk in zip(steps, tokens, strict=True):
        s = st.dropna(subset=["complete_t"]).sort_values("schedule_t")
        nxt = s["schedule_t"].shift(-1) - s["complete_t"]
        busy = (s["decode_reqs"].shift(-1) > 0) & nxt.gt(0)
        gaps.append(nxt[busy].to_numpy(dtype=float))
        reqs.append(s["decode_reqs"][busy].to_numpy(dtype=float))
        delays.append(_output_delays(s, tk))
    gap, req = np.concatenate(gaps), np.concatenate(reqs)
    update = robust_line(req, gap)
    host = _host((IN_SPAN_US * 1e-6, 1e-9), update, _output(delays, update))
    return _profile(name, f"the synchronous run {origin}", "dlfp.sim.enginefit.engine_host_fit", host,
                    ("schedule_us", "schedule_per_request_us", "input_us"),
                    f"{gap.size} busy gaps and {sum(d.size for d, _ in delays)} tokens of {origin}; schedule() inside "
                    "the fitted span (a token 1 us); input path assumed as gpu-node's")


def engine_host_fit_async(steps: Sequence[pd.DataFrame], tokens: Sequence[pd.DataFrame], device: Profile,
                          name: str, origin: str, fallback: EngineHost, fallback_name: str) -> dict[str, Any]:
    """The engine-core profile of a real-time modeled run under async scheduling, on the roofline ``device``
    profile it ran with (its model runner's host time per step; module docstring). Where the host always
    waited on the stream (a long modeled step), ``schedule()`` never shows and ``fallback``'s is taken,
    marked assumed: it hid under every step there, and does so in a replay too."""
    sched_s, sched_r, upd_s, upd_r, delays = [], [], [], [], []
    for st, tk in zip(steps, tokens, strict=True):
        s = st[st["total_tokens"] > 0].dropna(subset=["complete_t", "exec_done_t"]).sort_values("step")
        s = s.reset_index(drop=True)
        requests = s["decode_reqs"] + (s["prefill_tokens"] > 0)
        runner_s = (device.host_step_us + device.host_request_us * requests) * 1e-6
        nxt_sched, after_next = s["schedule_t"].shift(-1), s["schedule_t"].shift(-2)
        ahead = nxt_sched < s["complete_t"]  # step k+1 scheduled before step k was collected: the overlap
        # k's output existed before the engine could have begun to wait for it (its schedule() for k+1 and the
        # model runner's host time were not over yet): nothing was waited for
        ready = ahead & (s["exec_done_t"] < nxt_sched + runner_s.shift(-1))
        span = (s["complete_t"] - nxt_sched - runner_s.shift(-1))[ready]
        sched_s.append(span.to_numpy(dtype=float))
        sched_r.append(requests.shift(-1)[ready].to_numpy(dtype=float))
        gap = (after_next - s["complete_t"])[ahead & after_next.notna()]
        upd_s.append(gap.to_numpy(dtype=float))
        upd_r.append(requests[gap.index].to_numpy(dtype=float))
        delays.append(_output_delays(s, tk))
    n = sum(len(x) for x in sched_s)
    assumed = ["input_us"]
    if n >= MIN_SCHEDULE_POINTS:
        sched = robust_line(np.concatenate(sched_r), np.concatenate(sched_s))
        said = f"{n} steps scheduled while their predecessor's output was already there"
    else:  # the host always waited on the stream: schedule() hid under every step, and cannot be seen
        sched, said = (fallback.schedule_us * 1e-6, fallback.schedule_request_us * 1e-6), (
            f"schedule() never visible (every step waited on the stream): {fallback_name}'s")
        assumed += ["schedule_us", "schedule_per_request_us"]
    upd = robust_line(np.concatenate(upd_r), np.concatenate(upd_s))
    host = _host(sched, upd, _output(delays, upd))
    return _profile(name, f"the real-time run {origin}", "dlfp.sim.enginefit.engine_host_fit_async", host, assumed,
                    f"{said}, {sum(len(x) for x in upd_s)} update gaps and {sum(d.size for d, _ in delays)} tokens of "
                    f"{origin}; the model runner's host time from cost profile {device.name}; input path assumed "
                    "as gpu-node's")
