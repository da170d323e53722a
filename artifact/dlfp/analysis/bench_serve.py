"""Import a ``vllm bench serve --save-result --save-detailed`` JSON file as a trial trace.

This lets runs made with vLLM's own benchmark client go through the same metrics and
statistics as this project's traces (see :mod:`dlfp.metrics` for the format).

vLLM's detailed result holds parallel lists, one entry per request: ``input_lens``,
``output_lens``, ``ttfts``, ``itls``, ``start_times``, ``generated_texts``, ``errors``.
``start_times`` are the client's ``time.perf_counter()`` at send, so only their
differences mean anything; they are shifted so the first send is at 0. ``vllm bench serve``
keeps no separate scheduled arrival time, so ``arrival_s`` equals ``send_s`` and TTFT from
arrival equals vLLM's TTFT from send.

Chunks, not tokens: vLLM records one ITL per received *chunk* after the first, and a chunk
may carry several tokens. The tokens frame therefore has one row per chunk event (``index``
counts chunks): index 0 at the first chunk, then one row per ITL at the cumulative time.
:func:`dlfp.metrics.itl_gaps` on these rows gives back exactly vLLM's ITL values (up to
float rounding of the cumulative sums), because each row is its own arrival event as long
as every ITL is > 0. Token counts come from ``output_lens``, not from the row count.
"""

from __future__ import annotations

import json
import math
import os
from itertools import accumulate
from typing import Any

import pandas as pd

from dlfp.metrics import REQUEST_COLUMNS, TOKEN_COLUMNS

LIST_FIELDS = ("input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors")
SOURCE = "vllm bench serve"


def _check_lists(raw: dict[str, Any], path: str) -> int:
    """The request count, after checking the detailed fields exist as equal-length lists."""
    for name in LIST_FIELDS:
        if name not in raw:
            raise ValueError(f"{path}: field {name!r} is missing; it is needed for the trace "
                             f"(run vllm bench serve with --save-result --save-detailed)")
        if not isinstance(raw[name], list):
            raise ValueError(f"{path}: field {name!r} is a {type(raw[name]).__name__}; expected a list")
    n = len(raw["start_times"])
    for name in LIST_FIELDS:
        if len(raw[name]) != n:
            raise ValueError(f"{path}: field {name!r} has {len(raw[name])} entries but start_times has "
                             f"{n}; the detailed fields must be parallel lists")
    return n


def _times(raw: dict[str, Any], path: str, n: int) -> tuple[list[float], list[float], list[list[float]]]:
    """``(start_times, ttfts, itls)`` as floats; a null TTFT (failed request) becomes 0."""
    starts, ttfts, itls = [], [], []
    for i in range(n):
        start, ttft, itl = raw["start_times"][i], raw["ttfts"][i], raw["itls"][i]
        if not isinstance(start, (int, float)) or not math.isfinite(start):
            raise ValueError(f"{path}: start_times[{i}]={start!r} is invalid; expected a finite number")
        ttft = 0.0 if ttft is None else ttft
        if not isinstance(ttft, (int, float)) or not ttft >= 0 or math.isinf(ttft):
            raise ValueError(f"{path}: ttfts[{i}]={ttft!r} is invalid; expected a finite number >= 0 or null")
        if not isinstance(itl, list) or not all(isinstance(x, (int, float)) and 0 <= x < math.inf
                                                for x in itl):
            raise ValueError(f"{path}: itls[{i}]={itl!r} is invalid; expected a list of finite numbers >= 0")
        starts.append(float(start))
        ttfts.append(float(ttft))
        itls.append([float(x) for x in itl])
    return starts, ttfts, itls


def load_bench_json(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """``(requests, tokens, meta)`` from a detailed ``vllm bench serve`` result file.

    A request is ``ok`` when its error is empty and it got a first chunk (TTFT > 0), else
    ``failed`` with NaN ``first_token_s``/``finish_s``. ``finish_s`` is the last chunk's time,
    i.e. send + TTFT + sum(ITLs), summed in chunk order so it equals the last chunk row exactly.
    Chunk rows are written for every request that got a first chunk, so a request that failed
    mid-stream keeps what the client saw; the metrics use ok requests only. vLLM does not save
    the requested output length, so ``output_len_requested`` is the received ``output_lens``
    value (0 for failed requests).
    ``meta`` is every non-list field of the file plus ``source``.
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: top level is a {type(raw).__name__}; expected a JSON object")
    n = _check_lists(raw, path)
    starts, ttfts, itls = _times(raw, path, n)
    origin = min(starts, default=0.0)
    req_rows: list[dict[str, Any]] = []
    tok_rows: list[dict[str, Any]] = []
    for i in range(n):
        rid = f"b{i:04d}"
        send_s = starts[i] - origin
        error = raw["errors"][i] or None
        ok = error is None and ttfts[i] > 0
        chunk_t = list(accumulate(itls[i], initial=send_s + ttfts[i]))
        req_rows.append({
            "request_id": rid, "arrival_s": send_s, "send_s": send_s,
            "first_token_s": chunk_t[0] if ok else math.nan,
            "finish_s": chunk_t[-1] if ok else math.nan,
            "prompt_len": raw["input_lens"][i], "output_len_requested": raw["output_lens"][i],
            "output_len": raw["output_lens"][i], "status": "ok" if ok else "failed", "error": error,
        })
        if ttfts[i] > 0:
            tok_rows.extend({"request_id": rid, "index": k, "t_s": t} for k, t in enumerate(chunk_t))
    meta = {k: v for k, v in raw.items() if not isinstance(v, list)}
    meta["source"] = SOURCE
    return (pd.DataFrame(req_rows, columns=list(REQUEST_COLUMNS)),
            pd.DataFrame(tok_rows, columns=list(TOKEN_COLUMNS)), meta)
