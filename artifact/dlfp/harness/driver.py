"""Open-loop client: send each request at its scheduled instant, timestamp every token.

Open loop means a request is sent when its arrival time comes, whatever is still in
flight, so a slow system cannot slow the arrivals down (closed-loop clients hide queueing
delay). Tokens are streamed back as deltas; each delivery is stamped on the client with
``time.monotonic()`` (system-wide on Linux, so engine-side step records share the clock).
Failed and cancelled requests are recorded with their error, never dropped.

The target is anything with vLLM's ``AsyncLLM.generate`` shape, in process, or an
OpenAI-compatible server (``vllm serve``) through :class:`HttpTarget`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from dlfp.harness.workload import Request


class Target(Protocol):
    """Streams the output token ids of one request, one list per delivery."""

    def stream(self, request: Request) -> AsyncIterator[list[int]]: ...


@dataclass
class RequestTrace:
    """What the client saw of one request (times in seconds from the trial start)."""

    request: Request
    send_s: float = float("nan")
    token_ids: list[int] = field(default_factory=list)
    token_t: list[float] = field(default_factory=list)
    finish_s: float = float("nan")
    status: str = "cancelled"
    error: str | None = "not sent"


@dataclass
class TrialTrace:
    """The requests and tokens tables of one arm, as the metrics module expects them."""

    requests: pd.DataFrame
    tokens: pd.DataFrame
    t0_monotonic: float
    lateness_s: list[float]


class EngineTarget:
    """An in-process ``AsyncLLM`` (engine core in its own process)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=request.output_len, ignore_eos=True, temperature=0.0,
                                output_kind=RequestOutputKind.DELTA)
        prompt = TokensPrompt(prompt_token_ids=list(request.prompt_token_ids))
        async for out in self.engine.generate(prompt, params, request_id=request.request_id):
            yield list(out.outputs[0].token_ids)


class HttpTarget:
    """A running OpenAI-compatible server: ``/v1/completions`` with streaming and token ids."""

    def __init__(self, base_url: str, model: str, session: Any) -> None:
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.model = model
        self.session = session

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        body = {"model": self.model, "prompt": list(request.prompt_token_ids),
                "max_tokens": request.output_len, "ignore_eos": True, "temperature": 0.0,
                "stream": True, "return_token_ids": True}
        async with self.session.post(self.url, json=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:300]}")
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                choice = json.loads(line[5:])["choices"][0]
                ids = choice.get("token_ids")
                if ids is None:
                    raise RuntimeError("server does not return token ids (needs vLLM >= 0.10)")
                if ids:
                    yield list(ids)


async def _run_one(target: Target, trace: RequestTrace, t0: float) -> None:
    trace.send_s = time.monotonic() - t0
    trace.error = None
    try:
        async for ids in target.stream(trace.request):
            now = time.monotonic() - t0
            trace.token_ids.extend(ids)
            trace.token_t.extend([now] * len(ids))
        trace.status = "ok"
    except asyncio.CancelledError:
        trace.status, trace.error = "cancelled", "cancelled"
        raise
    except Exception as exc:  # a failed request is data, not a crash of the trial
        trace.status, trace.error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        trace.finish_s = time.monotonic() - t0


SPIN_S = 0.002
"""The event loop's timers wake up to ~1 ms late (epoll's millisecond timeout); the last
``SPIN_S`` before an arrival are spent yielding to other tasks instead, so sends stay
punctual without starving the requests in flight."""


async def _until(deadline: float) -> None:
    """Return at ``deadline`` (``time.monotonic()``), as punctually as the loop allows."""
    delay = deadline - time.monotonic()
    if delay > SPIN_S:
        await asyncio.sleep(delay - SPIN_S)
    while time.monotonic() < deadline:
        await asyncio.sleep(0)


async def drive(target: Target, requests: Sequence[Request],
                progress: Callable[[int], None] | None = None) -> TrialTrace:
    """Replay ``requests`` open-loop against ``target``; returns the client-side trace.

    One dispatcher waits for each arrival and spawns the request; lateness (send minus
    scheduled arrival) is reported with the trace. ``progress`` is called with 1 as each request
    ends, and once with 0 as the replay starts, which tells a progress report the engine is up.
    """
    traces = [RequestTrace(r) for r in sorted(requests, key=lambda r: r.arrival_s)]
    tasks: list[asyncio.Task[None]] = []
    if progress is not None:
        progress(0)  # before t0: reporting it costs the first send nothing
    t0 = time.monotonic()
    try:
        for tr in traces:
            await _until(t0 + tr.request.arrival_s)
            task = asyncio.create_task(_run_one(target, tr, t0))
            if progress is not None:
                task.add_done_callback(lambda _t: progress(1))
            tasks.append(task)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return to_trace(traces, t0)


def stamp(t_s: float) -> float:
    """A token's client time as the trace keeps it: rounded to the microsecond, the unit a run folder
    stores it in (:data:`dlfp.trials.runfolder.TOKEN_TICKS_PER_S`), so the stored table reads back
    exactly, and ``first_token_s`` stays the same reading as its first token's ``t_s``."""
    return round(t_s * 1_000_000) / 1_000_000


def output_digest(token_ids: Sequence[int]) -> str:
    """A request's output token ids as 16 hex digits (BLAKE2b, 8 bytes, of them as little-endian int32):
    two runs produced the same output exactly when their digests agree (a chance collision is 2^-64),
    which lets a run drop the ids themselves and still be compared (``token_ids: false``)."""
    return hashlib.blake2b(np.asarray(token_ids, dtype="<i4").tobytes(), digest_size=8).hexdigest()


def to_trace(traces: list[RequestTrace], t0: float) -> TrialTrace:
    """The trial tables of finished request traces (times already relative to ``t0``, the replay's start)."""
    req_rows: list[dict[str, Any]] = []
    tok_rows: list[dict[str, Any]] = []
    for tr in traces:
        r = tr.request
        times = [stamp(t) for t in tr.token_t]
        req_rows.append({
            "request_id": r.request_id, "arrival_s": r.arrival_s, "send_s": tr.send_s,
            "first_token_s": times[0] if times else float("nan"),
            "finish_s": tr.finish_s, "prompt_len": r.prompt_len,
            "output_len_requested": r.output_len, "output_len": len(tr.token_ids),
            "status": tr.status, "error": tr.error, "output_digest": output_digest(tr.token_ids),
        })
        tok_rows.extend({"request_id": r.request_id, "index": i, "t_s": t, "token_id": tok}
                        for i, (t, tok) in enumerate(zip(times, tr.token_ids, strict=True)))
    tokens = pd.DataFrame(tok_rows, columns=["request_id", "index", "t_s", "token_id"])
    lateness = [tr.send_s - tr.request.arrival_s for tr in traces if tr.send_s == tr.send_s]
    return TrialTrace(pd.DataFrame(req_rows), tokens, t0, lateness)
