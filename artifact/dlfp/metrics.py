"""Latency metrics from raw client traces, defined to match ``vllm bench serve`` where it has one.

Two frames come in, all times in seconds on one monotonic clock:

* requests: ``request_id, arrival_s, send_s, first_token_s, finish_s, prompt_len,
  output_len_requested, output_len, status, error``; ``status`` is ``ok``, ``failed`` or
  ``cancelled``; ``first_token_s``/``finish_s`` are NaN when the event never happened.
* tokens: ``request_id, index, t_s``; one row per generated token, ``t_s`` the client time its
  chunk arrived, so tokens delivered in one chunk share ``t_s``.

As in ``vllm bench serve``, latency distributions (ITL, TTFT, TPOT) use successful requests
only; failed and cancelled requests count against SLO compliance instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

REQUEST_COLUMNS = ("request_id", "arrival_s", "send_s", "first_token_s", "finish_s",
                   "prompt_len", "output_len_requested", "output_len", "status", "error")
TOKEN_COLUMNS = ("request_id", "index", "t_s")
STATUSES = ("ok", "failed", "cancelled")
_KINDS = {"request_id": "strings", "status": "strings", "index": "integers", "error": None}
"""What each column must hold (default: numbers), so a wrong type is named here, not deep in numpy."""


def _kind_ok(values: pd.Series, kind: str | None) -> bool:
    if kind is None or values.empty:
        return True
    if kind == "strings":
        return pd.api.types.infer_dtype(values, skipna=False) == "string"
    numeric = pd.api.types.is_integer_dtype if kind == "integers" else pd.api.types.is_numeric_dtype
    return numeric(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype)


def _require(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} frame: missing column(s) {missing}; expected {list(columns)}")
    for c in columns:
        kind = _KINDS.get(c, "numbers")
        if not _kind_ok(df[c], kind):
            raise ValueError(f"{what} frame: column {c!r} holds {pd.api.types.infer_dtype(df[c], skipna=False)} "
                             f"values; allowed: {kind}")


def _ok(requests: pd.DataFrame, need: Sequence[str]) -> pd.DataFrame:
    """The successful requests, refusing unknown statuses and ok rows lacking ``need`` times."""
    _require(requests, REQUEST_COLUMNS, "requests")
    unknown = sorted(set(requests["status"]) - set(STATUSES), key=str)
    if unknown:
        raise ValueError(f"requests: status value(s) {unknown} are invalid; allowed: {STATUSES}")
    dup = requests["request_id"][requests["request_id"].duplicated()]
    if len(dup):
        raise ValueError(f"requests: request_id {dup.iloc[0]!r} appears more than once; allowed: each request once")
    ok = requests[requests["status"] == "ok"]
    for col in ("arrival_s", *need):
        bad = ok["request_id"][~np.isfinite(ok[col].to_numpy(dtype=np.float64))]
        if len(bad):
            raise ValueError(f"requests: {col} is NaN/inf for ok request(s) {sorted(bad)[:5]}; "
                             f"an ok request must have a finite {col}")
    # The client's clock: a request arrives, then its first token, then it finishes.
    order = [c for c in ("arrival_s", "first_token_s", "finish_s") if c == "arrival_s" or c in need]
    for before, after in itertools.pairwise(order):
        bad = ok["request_id"][ok[after] < ok[before]]
        if len(bad):
            raise ValueError(f"requests: {after} is before {before} for ok request(s) {sorted(bad)[:5]}; "
                             f"allowed: {before} <= {after}")
    return ok


def check_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """The ok requests of a requests frame, after every check :func:`summarize` makes (readers of
    run folders call it to name the file of a bad frame)."""
    return _ok(requests, ("first_token_s", "finish_s", "output_len"))


def itl_gaps(tokens: pd.DataFrame) -> np.ndarray:
    """Inter-token latencies in seconds, pooled over all requests in ``tokens``.

    ``vllm bench serve`` appends one ITL per received chunk after the first: the time since
    the previous chunk. Here, per request: sort by ``index``, collapse consecutive tokens with
    identical ``t_s`` (one chunk) into one arrival event, and take the differences between
    consecutive events, so a request with k events contributes k - 1 gaps, all > 0. Two
    distinct chunks stamped with exactly the same clock reading would merge; with a
    nanosecond-resolution clock that does not happen in practice. A ``t_s`` that decreases
    with ``index`` is a broken trace and raises.
    """
    return _request_gaps(tokens)[1]


def per_request_itl(tokens: pd.DataFrame) -> np.ndarray:
    """Each request's mean inter-token gap (s), over the gaps of :func:`itl_gaps`.

    The per-request ITL that GuideLLM and AIPerf take their tails over (vLLM calls the
    per-token version TPOT); a request with fewer than two chunks has none.
    """
    rid, gaps = _request_gaps(tokens)
    if not len(gaps):
        return np.array([])
    return pd.Series(gaps).groupby(rid, sort=False).mean().to_numpy(dtype=np.float64)


def _request_gaps(tokens: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(request id of each gap, gap in seconds), validated as :func:`itl_gaps` documents."""
    _require(tokens, TOKEN_COLUMNS, "tokens")
    t = tokens.sort_values(["request_id", "index"], kind="stable")
    rid = t["request_id"].to_numpy()
    idx = t["index"].to_numpy()
    ts = t["t_s"].to_numpy(dtype=np.float64)
    if not np.isfinite(ts).all():
        raise ValueError("tokens: t_s contains NaN/inf; allowed: finite timestamps")
    same = rid[1:] == rid[:-1]
    dup = same & (idx[1:] == idx[:-1])
    if dup.any():
        raise ValueError(f"tokens: request {rid[1:][dup][0]!r} repeats index {idx[1:][dup][0]}; "
                         f"allowed: each (request_id, index) once")
    d = np.diff(ts)
    back = same & (d < 0)
    if back.any():
        raise ValueError(f"tokens: t_s decreases with index in request {rid[1:][back][0]!r}; "
                         f"allowed: non-decreasing t_s in index order")
    keep = same & (d > 0)
    return rid[1:][keep], d[keep]


def stalls(gaps: np.ndarray, threshold_s: float) -> dict[str, float]:
    """Stall events among inter-token gaps: count and share above ``threshold_s``, and the worst gap (ms)."""
    gaps = np.asarray(gaps, dtype=np.float64)
    over = int((gaps > threshold_s).sum())
    return {"stalls": over, "stall_share": over / gaps.size if gaps.size else math.nan,
            "worst_gap_ms": float(gaps.max() * 1e3) if gaps.size else math.nan}


def ttft(requests: pd.DataFrame) -> np.ndarray:
    """Time to first token of ok requests, measured from the *scheduled* arrival instant.

    Unlike ``vllm bench serve`` (which measures from when the client sent the request), a
    client that sends late is charged to the system: in an open-loop test the user arrived at
    ``arrival_s`` whatever the client did. :func:`ttft_from_send` gives vLLM's definition.
    """
    ok = _ok(requests, ("first_token_s",))
    return (ok["first_token_s"] - ok["arrival_s"]).to_numpy(dtype=np.float64)


def ttft_from_send(requests: pd.DataFrame) -> np.ndarray:
    """Time to first token of ok requests from the send instant, as ``vllm bench serve``."""
    ok = _ok(requests, ("first_token_s", "send_s"))
    return (ok["first_token_s"] - ok["send_s"]).to_numpy(dtype=np.float64)


def _tpot(ok: pd.DataFrame) -> np.ndarray:
    """Time per output token after the first; 0 for single-token outputs (vLLM's convention)."""
    n = ok["output_len"].to_numpy(dtype=np.float64)
    decode = (ok["finish_s"] - ok["first_token_s"]).to_numpy(dtype=np.float64)
    return np.where(n > 1, decode / np.maximum(n - 1, 1), 0.0)


def percentiles(x: Any, ps: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
    """``p<p>`` (numpy linear interpolation, as ``vllm bench serve``), ``mean`` and ``max``;
    all NaN for an empty sample. NaN inside a sample is refused rather than propagated."""
    x = np.asarray(x, dtype=np.float64)
    for p in ps:
        if isinstance(p, bool) or not 0 <= p <= 100:
            raise ValueError(f"ps={p!r} is invalid; allowed: numbers in [0, 100]")
    if np.isnan(x).any():
        raise ValueError("percentiles: x contains NaN; allowed: numbers without NaN")
    keys = [f"p{p:g}" for p in ps] + ["mean", "max"]
    if x.size == 0:
        return dict.fromkeys(keys, math.nan)
    values = [*np.percentile(x, ps), x.mean(), x.max()]
    return {k: float(v) for k, v in zip(keys, values, strict=True)}


def _check_slo(name: str, value: float) -> None:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{name}={value!r} is invalid; allowed: seconds > 0 (inf: no SLO)")


def slo_compliance(requests: pd.DataFrame, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Fraction of *all* requests that succeeded with TTFT <= ttft_slo_s and TPOT <= tpot_slo_s.

    This is ``vllm bench serve``'s goodput test per request (TPOT = (finish - first token) /
    (output_len - 1), 0 when output_len is 1; both bounds inclusive), divided by the number of
    requests instead of the duration, so failed and cancelled requests count as misses. TTFT is
    measured from arrival (see :func:`ttft`). NaN when there are no requests.
    """
    _check_slo("ttft_slo_s", ttft_slo_s)
    _check_slo("tpot_slo_s", tpot_slo_s)
    ok = _ok(requests, ("first_token_s", "finish_s", "output_len"))
    if len(requests) == 0:
        return math.nan
    first = (ok["first_token_s"] - ok["arrival_s"]).to_numpy(dtype=np.float64)
    good = (first <= ttft_slo_s) & (_tpot(ok) <= tpot_slo_s)
    return float(good.sum() / len(requests))


def _ms(prefix: str, stats: Mapping[str, float]) -> dict[str, float]:
    return {f"{prefix}_{k}_ms": v * 1000.0 for k, v in stats.items()}


def summarize(requests: pd.DataFrame, tokens: pd.DataFrame, ttft_slo_s: float,
              tpot_slo_s: float, stall_s: float = 0.1, long_gap_s: float = 0.05) -> dict[str, Any]:
    """One run's headline numbers: counts, pooled ITL and TTFT percentiles (ms), P99 of
    per-request mean ITL, stall events (gaps above ``stall_s``, the ITL SLO), the share of gaps
    above ``long_gap_s`` (DLFP's target interval: in stock every one is a prefill stall, the
    quantity a design predicts), SLO compliance, and output throughput = output tokens of ok
    requests / (first arrival to last finish)."""
    ok = _ok(requests, ("first_token_s", "finish_s", "output_len"))
    _require(tokens, TOKEN_COLUMNS, "tokens")  # before the filter below reads request_id (a fuzz find)
    status = requests["status"]
    ok_tokens = tokens[tokens["request_id"].isin(ok["request_id"])]
    gaps = itl_gaps(ok_tokens)
    # One clock reading: an ok request's first_token_s is the t_s of its first token.
    seen = ok_tokens.groupby("request_id")["t_s"].min()
    off = seen.index[seen.to_numpy() != ok.set_index("request_id")["first_token_s"].reindex(seen.index).to_numpy()]
    if len(off):
        raise ValueError(f"requests/tokens: first_token_s of ok request(s) {sorted(off)[:5]} differs from the t_s "
                         "of their first token; allowed: the same clock reading")
    output_tokens = int(ok["output_len"].sum())
    last_finish = requests["finish_s"].max()  # NaN-skipping: failed requests may lack one
    duration = float(last_finish - requests["arrival_s"].min()) if len(requests) else math.nan
    return {
        "n_requests": len(requests),
        "n_ok": len(ok),
        "n_failed": int((status == "failed").sum()),
        "n_cancelled": int((status == "cancelled").sum()),
        **_ms("itl", percentiles(gaps)),
        "itl_req_p99_ms": percentiles(per_request_itl(ok_tokens), (99,))["p99"] * 1000.0,
        **stalls(gaps, stall_s),
        "long_gap_share": float((gaps > long_gap_s).mean()) if gaps.size else math.nan,
        **_ms("ttft", percentiles(ttft(requests))),
        "slo_compliance": slo_compliance(requests, ttft_slo_s, tpot_slo_s),
        "output_tokens": output_tokens,
        "duration_s": duration,
        "output_throughput_tps": output_tokens / duration if duration > 0 else math.nan,
    }


def output_agreement(outputs_a: Mapping[str, str], outputs_b: Mapping[str, str]) -> dict[str, Any]:
    """How many requests produced identical outputs in two runs (e.g. stock vs DLFP), each output
    given by its digest (:func:`dlfp.analysis.runs.output_digests`).

    Compared over the union of request ids; an id missing on one side counts as a mismatch,
    so a run that drops requests cannot look more faithful. ``rate`` is NaN when both are empty.
    """
    ids = sorted(set(outputs_a) | set(outputs_b))
    mismatched = [rid for rid in ids
                  if rid not in outputs_a or rid not in outputs_b or outputs_a[rid] != outputs_b[rid]]
    n_identical = len(ids) - len(mismatched)
    return {
        "n_compared": len(ids),
        "n_identical": n_identical,
        "rate": n_identical / len(ids) if ids else math.nan,
        "mismatched": mismatched,
    }
