"""The book's tables of virtual against real time, from the reports ``dlfp bench virtual`` commits.

Three kinds of report (:mod:`dlfp.bench.virtual_time`): ``modes`` (the committed real-time capacity units
replayed in virtual time: per target, how far P99 ITL and P99 TTFT moved over the same units, and each arm's
capacity in both clocks; once with the ``gpu-node`` engine-core profile, once with each target's own
real-time host's, ``modes-measured``), ``speed`` (one unit per target in both clocks, timed on one
machine) and ``explanations`` (the explanations table in both clocks). Each carries its provenance
(commit, machine, vLLM, command), which the captions say: every number in them is simulated, and only
the speed ratios are this machine's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

ITL_TARGET, TTFT_TARGET = 0.05, 0.10
"""The issue's aims for the median difference over units: 5% on P99 ITL, 10% on P99 TTFT."""


def load(path: str | Path) -> dict[str, Any] | None:
    """A committed report, or None where there is none (the book says so instead of a table)."""
    p = Path(path)
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def made_by(report: Mapping[str, Any]) -> str:
    """The report's provenance in words: the command, the machine, the commit, vLLM, the date."""
    p = report.get("provenance") or {}
    git = p.get("git") or {}
    tree = "clean" if git.get("dirty") is False else "uncommitted changes"
    return (f"`{' '.join(p.get('argv') or ['?'])}` on a {p.get('machine', 'unrecorded machine')}, commit "
            f"{str(git.get('commit'))[:8]} ({tree}), vLLM {p.get('vllm', '?')}, {p.get('date', '?')[:10]}")


def modes_summary(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per target: units compared and the median relative difference (virtual / real - 1) of P99 ITL and
    P99 TTFT over them, with whether each is within its aim."""
    t = pd.DataFrame(report["summary"])
    return pd.DataFrame({
        "target": t["target"], "units": t["units"],
        "P99 ITL, median |difference|": t["itl_p99_median_abs_diff"],
        "P99 ITL, median difference": t["itl_p99_median_diff"],
        "P99 TTFT, median |difference|": t["ttft_p99_median_abs_diff"],
        "P99 TTFT, median difference": t["ttft_p99_median_diff"],
        "within the aims (5% ITL, 10% TTFT)": [
            "yes" if i <= ITL_TARGET and f <= TTFT_TARGET else "no"
            for i, f in zip(t["itl_p99_median_abs_diff"], t["ttft_p99_median_abs_diff"], strict=True)],
    })


def modes_capacity(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per target, SLO level and arm: the capacity in both clocks (requests/s, mean over trials) and the
    relative difference."""
    c = pd.DataFrame(report["capacity"])
    return c[["target", "level", "arm", "real", "virtual", "diff"]].rename(
        columns={"real": "real time (req/s)", "virtual": "virtual time (req/s)", "diff": "difference"})


def lightest_load(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per target: stock at the sweep's lowest load (no queue, rare prefill stalls), P50 and P99 ITL in
    both clocks, medians over trials: where the two clocks' medians agree and their P99s do not, the
    real-time tail is the simulating host's scheduling noise, which virtual time does not have."""
    u = pd.DataFrame(report["units"])
    light = u[u["unit_arm"] == "stock"]
    cols = ["itl_p50_ms_real", "itl_p50_ms_virtual", "itl_p99_ms_real", "itl_p99_ms_virtual"]
    t = light.groupby("target", sort=False)[cols].median().reset_index()
    return t.rename(columns={"itl_p50_ms_real": "P50 ITL, real (ms)", "itl_p50_ms_virtual": "P50 ITL, virtual (ms)",
                             "itl_p99_ms_real": "P99 ITL, real (ms)", "itl_p99_ms_virtual": "P99 ITL, virtual (ms)"})


def speed(report: Mapping[str, Any]) -> pd.DataFrame:
    """Per target: the unit's span, its wall time in each clock and the ratios."""
    u = pd.DataFrame(report["units"])
    return pd.DataFrame({
        "target": u["target"], "unit": u["unit"], "requests": u["requests"], "span (s)": u["span_s"],
        "real time, whole unit (s)": u["real_unit_s"], "real time, replay (s)": u["real_replay_s"],
        "virtual time (s)": u["virtual_s"], "speed-up, whole unit": u["ratio_unit"],
        "speed-up, replay": u["ratio_replay"]})


def explanations(report: Mapping[str, Any]) -> pd.DataFrame:
    """The explanations table's pattern column in both clocks, one row per candidate explanation."""
    column = "pattern (0.6B works; 8B, 32B, TP=2 do not)"
    rows = {mode: {r["variant"]: r[column] for r in report[mode]} for mode in ("real", "virtual")}
    return pd.DataFrame({"explanation": list(rows["real"]), "real time": list(rows["real"].values()),
                         "virtual time": [rows["virtual"].get(v, "not run") for v in rows["real"]]})


def headline(modes: Mapping[str, Any] | None, fast: Mapping[str, Any] | None) -> str:
    """One sentence for the chapter: how many targets are within the aims, and the speed-up range."""
    parts = []
    if modes is not None:
        s = modes_summary(modes)
        within = s[s["within the aims (5% ITL, 10% TTFT)"] == "yes"]["target"].tolist()
        parts.append(f"over the same units, {len(within)} of {len(s)} modeled targets stay within the aims "
                     f"(median P99 ITL difference at most 5%, P99 TTFT 10%)"
                     + (f": {', '.join(within)}" if within and len(within) < len(s) else ""))
    if fast is not None:
        r = speed(fast)["speed-up, replay"]
        parts.append(f"a unit runs {r.min():.1f}x to {r.max():.1f}x faster than its real-time replay on "
                     f"{(fast.get('provenance') or {}).get('machine', 'this machine')}")
    return "; ".join(parts) + "." if parts else "no virtual-time report is committed yet."
