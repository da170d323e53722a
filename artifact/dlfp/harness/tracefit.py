"""A request trace as a workload model: arrival burstiness and per-class length distributions.

A deployer's trace (arrival times, prompt and output lengths) is one rate. A capacity sweep replays the
same workload at several rates, so the trace is turned into the workload language the sweeps use
(:class:`dlfp.harness.workload.WorkloadSpec`): gamma arrival gaps whose shape matches the trace's gaps
(method of moments: shape = mean^2 / variance, ``vllm bench serve``'s ``--burstiness``), and its
requests split into a ``short`` and a ``long`` class at :data:`LONG_PROMPT` tokens, each class's
prompt and output lengths a lognormal with the class's median and log-spread, clipped to the class's
observed range (a class whose lengths are all equal keeps that length). The model, not the trace, is
what runs: the fit is printed beside the answer, so a reader can judge it.

File: CSV (a header line) or Parquet with columns ``arrival_s``, ``prompt_len``, ``output_len``; one row
per request; times in seconds from any origin, non-decreasing. Refused, naming the first bad row:
missing columns, negative or non-finite or unsorted times, lengths that are not positive integers, and
a request longer than the model length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlfp.harness.workload import BURSTINESS_RANGE

COLUMNS = ("arrival_s", "prompt_len", "output_len")
LONG_PROMPT = 1024
"""Prompts of at least this many tokens form the ``long`` class: those a stock budget prefills in one
step beside the decodes, the stall every arm of the study trades against."""
MIN_REQUESTS = 20
"""Fewest requests a trace must hold for its gaps' spread and its classes' lengths to say anything."""


def read_trace(path: str | Path, max_model_len: int | None = None) -> pd.DataFrame:
    """The trace's three columns, validated (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"trace {path}: no such file")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # pandas raises many kinds for a file that is not a table
        raise ValueError(f"trace {path}: cannot read it as {'Parquet' if path.suffix == '.parquet' else 'CSV'} "
                         f"({type(exc).__name__}: {exc})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"trace {path}: missing column(s) {missing}; needs {list(COLUMNS)}, got {list(df.columns)}")
    if len(df) < MIN_REQUESTS:
        raise ValueError(f"trace {path}: {len(df)} requests; needs at least {MIN_REQUESTS}")
    t = pd.to_numeric(df["arrival_s"], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if bad.size:
        raise ValueError(f"trace {path}: row {bad[0]} has arrival_s {_cell(df['arrival_s'].iloc[bad[0]])}; "
                         "allowed: a finite number of seconds >= 0")
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise ValueError(f"trace {path}: arrival_s is not sorted: row {i} ({t[i]:g}) comes before row {i - 1} "
                         f"({t[i - 1]:g}); sort the trace by arrival time")
    if t[-1] - t[0] <= 0:
        raise ValueError(f"trace {path}: every request arrives at the same instant; a rate needs a time span")
    out = {"arrival_s": t - t[0]}
    for col in ("prompt_len", "output_len"):
        raw = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        wrong = np.flatnonzero(~np.isfinite(raw) | (raw < 1) | (raw != np.round(raw)))
        if wrong.size:
            raise ValueError(f"trace {path}: row {wrong[0]} has {col} {_cell(df[col].iloc[wrong[0]])}; "
                             "allowed: a positive integer number of tokens")
        out[col] = raw.astype(np.int64)
    frame = pd.DataFrame(out)
    if max_model_len is not None:
        over = np.flatnonzero(frame.prompt_len + frame.output_len > max_model_len)
        if over.size:
            i = int(over[0])
            raise ValueError(f"trace {path}: row {i} needs {frame.prompt_len[i]} + {frame.output_len[i]} tokens, more "
                             f"than the model length {max_model_len}")
    return frame


def _cell(value: Any) -> str:
    """A table cell as the file holds it (a numpy scalar as its plain number)."""
    return repr(value.item() if hasattr(value, "item") else value)


def _length(values: np.ndarray) -> Any:
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        return {"fixed": lo}
    logs = np.log(values.astype(float))
    median = int(min(hi, max(lo, round(float(np.median(values))))))
    return {"lognormal": {"median": median, "sigma": round(max(float(logs.std()), 1e-3), 4), "min": lo, "max": hi}}


def fit_workload(trace: pd.DataFrame) -> dict[str, Any]:
    """The workload mapping (``arrival`` and ``classes``) of a validated trace, and its rate under
    ``trace_rate_rps`` (module docstring)."""
    gaps = np.diff(trace["arrival_s"].to_numpy(dtype=float))
    mean, var = float(gaps.mean()), float(gaps.var())
    lo, hi = BURSTINESS_RANGE
    shape = hi if var == 0 else min(hi, max(lo, mean * mean / var))
    classes = []
    long = trace["prompt_len"] >= LONG_PROMPT
    for name, rows in (("short", trace[~long]), ("long", trace[long])):
        if len(rows):
            classes.append({"name": name, "weight": len(rows),
                            "prompt_len": _length(rows["prompt_len"].to_numpy()),
                            "output_len": _length(rows["output_len"].to_numpy())})
    return {"arrival": {"kind": "gamma", "burstiness": round(shape, 4)}, "classes": classes,
            "trace_rate_rps": (len(trace) - 1) / float(trace["arrival_s"].iloc[-1]),
            "trace_requests": len(trace)}


def describe(fitted: dict[str, Any]) -> str:
    """The fitted model in a sentence per part, for the answer's footnote."""
    parts = [f"{fitted['trace_requests']} requests at {fitted['trace_rate_rps']:.3g} req/s; arrivals modeled as "
             f"gamma gaps of burstiness {fitted['arrival']['burstiness']:g} (1: Poisson)"]
    total = sum(c["weight"] for c in fitted["classes"])
    for c in fitted["classes"]:
        parts.append(f"{c['name']} ({c['weight'] / total:.0%}): prompt {_words(c['prompt_len'])}, "
                     f"output {_words(c['output_len'])}")
    return "; ".join(parts)


def _words(length: Any) -> str:
    if "fixed" in length:
        return f"{length['fixed']} tokens"
    ln = length["lognormal"]
    return f"lognormal median {ln['median']}, sigma {ln['sigma']:g}, {ln['min']}-{ln['max']}"


def is_trace(name: str) -> bool:
    """Does a workload argument name a trace file (rather than a shipped workload)?"""
    return Path(name).suffix in (".csv", ".parquet")
