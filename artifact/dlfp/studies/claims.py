"""The paper's claims checked against our runs, by ranges declared before the runs were made.

``configs/claims.yaml`` lists each claim, what the paper reports, and per source (a measured GPU
run, the CPU paired run, a modeled run) what our value must satisfy for the claim to count as
reproduced there. :func:`evaluate` reads the values from the rendered runs' raw traces and gives
each row a verdict: *reproduced*, *not reproduced*, or *not testable here* (no such run, a
single trial, or a run outside its design's regime). The book's prose follows these verdicts;
it is never written to a number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dlfp.analysis.labels import source_line
from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.analysis.stats import paired
from dlfp.analysis.tables import regime
from dlfp.paths import CONFIGS
from dlfp.trials.config import REFERENCE
from dlfp.trials.provenance import run_folders

CLAIMS_FILE = CONFIGS / "claims.yaml"
EXPECTATIONS = ("ci_lo_above", "ci_hi_below", "ci_overlaps", "at_least", "at_most")
VALUES = ("itl_reduction", "output_agreement", "failures", "slo_change_abs", "ttft_worst_over_slo")
REGIME_BOUND = ("itl_reduction",)
"""Values that only mean something inside the design's regime (stalls the pooled P99 can see)."""


def load_claims(path: Path = CLAIMS_FILE) -> list[dict[str, Any]]:
    """The declared claims, validated (unknown value or expectation names are refused by name)."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    claims = raw.get("claims") if isinstance(raw, dict) else None
    if not isinstance(claims, list) or not claims:
        raise ValueError(f"{path}: expected a non-empty list under 'claims'")
    for i, claim in enumerate(claims):
        if not isinstance(claim, dict):
            raise ValueError(f"{path}: claims[{i}] is {claim!r}; expected a mapping {{id, claim, paper, rows}}")
        for key in ("id", "claim", "paper", "rows"):
            if key not in claim:
                raise ValueError(f"{path}: claim {claim.get('id', i)!r} lacks {key!r}")
        if not isinstance(claim["rows"], list) or not all(isinstance(r, dict) for r in claim["rows"]):
            raise ValueError(f"{path}: claim {claim['id']!r} has rows {claim['rows']!r}; expected a list of mappings")
        for row in claim["rows"]:
            if not isinstance(row.get("run"), str):
                raise ValueError(f"{path}: claim {claim['id']!r} has run {row.get('run')!r}; expected a run name")
            if row.get("value") not in VALUES:
                raise ValueError(f"{path}: claim {claim['id']!r} has value {row.get('value')!r}; allowed {VALUES}")
            expect = row.get("expect")
            if not isinstance(expect, dict) or not expect or not set(expect) <= set(EXPECTATIONS) or not all(
                    _bound_ok(k, v) for k, v in expect.items()):
                raise ValueError(f"{path}: claim {claim['id']!r} expectation {expect!r}: allowed keys "
                                 f"{EXPECTATIONS}, each a number (ci_overlaps: [lo, hi])")
    return claims


def _bound_ok(key: str, bound: Any) -> bool:
    bounds = bound if key == "ci_overlaps" and isinstance(bound, list) and len(bound) == 2 else [bound]
    return (isinstance(bound, list) == (key == "ci_overlaps")) and all(
        isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)


def _value(run: RunData, rows: pd.DataFrame, name: str, arm: str) -> tuple[dict[str, float], str]:
    """(numbers the expectations test, the value as the table shows it), for ``arm`` against stock."""
    dlfp, stock = rows[rows.arm == arm].set_index("trial"), rows[rows.arm == REFERENCE].set_index("trial")
    if name == "itl_reduction":
        p = paired(rows, "itl_p99_ms", arm)
        if "t_lo" not in p:
            return {"value": p["mean_pct"]}, f"{p['mean_pct']:.1f}% (one trial)"
        return ({"value": p["mean_pct"], "lo": p["t_lo"], "hi": p["t_hi"]},
                f"{p['mean_pct']:.1f}% (paired 95% CI {p['t_lo']:.1f} to {p['t_hi']:.1f}%, {len(p['reductions_pct'])} "
                f"trials)")
    if name == "output_agreement":
        v = float(dlfp.agreement_rate.min())
        return {"value": v}, f"{v:.1%} of requests identical"
    if name == "failures":
        v = float(rows.n_failed.sum())
        return {"value": v}, f"{v:.0f} failed requests"
    if name == "slo_change_abs":
        change = dlfp.slo_compliance - stock.slo_compliance
        v = float(change.abs().max())
        return {"value": v}, (f"compliance stock {stock.slo_compliance.mean():.1%}, DLFP "
                              f"{dlfp.slo_compliance.mean():.1%} (largest per-trial change {v:.1%})")
    slo_ms = run.config.ttft_slo_s * 1e3
    v = float(dlfp.ttft_p99_ms.max() / slo_ms)
    t = paired(rows, "ttft_p99_ms", arm)
    return {"value": v}, (f"P99 TTFT {-t['mean_pct']:+.1f}% (mean change); worst DLFP P99 TTFT "
                          f"{dlfp.ttft_p99_ms.max():.0f} ms of a {slo_ms:.0f} ms SLO")


def _meets(numbers: Mapping[str, float], expect: Mapping[str, Any]) -> bool:
    checks = []
    for key, bound in expect.items():
        if key == "ci_lo_above":
            checks.append(numbers["lo"] > bound)
        elif key == "ci_hi_below":
            checks.append(numbers["hi"] < bound)
        elif key == "ci_overlaps":
            checks.append(numbers["lo"] <= bound[1] and numbers["hi"] >= bound[0])
        elif key == "at_least":
            checks.append(numbers["value"] >= bound)
        else:
            checks.append(numbers["value"] <= bound)
    return all(checks)


def expectation_text(expect: Mapping[str, Any]) -> str:
    words = {"ci_lo_above": "CI above {}%", "ci_hi_below": "CI below {}% (no benefit)",
             "ci_overlaps": "CI overlaps {}", "at_least": ">= {}", "at_most": "<= {}"}
    return "; ".join(words[k].format(v) for k, v in expect.items())


def claim_runs(paired_run: RunData, gpu_run_dir: str | Path, modeled_root: str | Path,
               baselines_root: str | Path) -> dict[str, RunData | None]:
    """The runs ``claims.yaml`` names, as the results chapter renders them: ``paired``, ``gpu`` (None
    when ``gpu_run_dir`` is empty) and ``modeled:<label>``/``baselines:<target>`` for the run folders
    under those roots. One function, so the book and the pipeline's closing lines judge the same runs."""
    runs: dict[str, RunData | None] = {"paired": paired_run, "gpu": load_run(gpu_run_dir) if gpu_run_dir else None}
    runs.update({f"modeled:{d.name}": load_run(d) for d in run_folders([modeled_root])})
    runs.update({f"baselines:{d.name}": load_run(d) for d in run_folders([baselines_root])})
    return runs


def evaluate(runs: Mapping[str, RunData | None], claims: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per (claim, source): the paper's value, ours, the declared expectation, the verdict.

    ``runs`` maps the names used in ``claims.yaml`` (``paired``, ``gpu``, ``modeled:<label>``,
    ``baselines:<target>``) to loaded runs; a missing or ``None`` entry makes its rows "not
    testable here". A row's ``arm`` (default ``dlfp``) is the arm compared with stock.
    """
    claims = load_claims() if claims is None else claims
    cache: dict[str, pd.DataFrame] = {}
    out = []
    for claim in claims:
        for row in claim["rows"]:
            run = runs.get(row["run"])
            entry = {"claim": claim["claim"], "paper": claim["paper"], "expected (declared)":
                     expectation_text(row["expect"])}
            if run is None:
                out.append({**entry, "ours": "", "source": f"no {row['run']} run rendered",
                            "verdict": "not testable here", "note": row.get("note", "")})
                continue
            if row["run"] not in cache:  # each run's rows once, however many claim rows read it
                cache[row["run"]] = trial_rows(run)
            rows = cache[row["run"]]
            arm = row.get("arm", "dlfp")
            if arm not in run.arms:
                raise ValueError(f"claims: row {row} names arm {arm!r}, but {run.path} has arms {list(run.arms)}")
            numbers, shown = _value(run, rows, row["value"], arm)
            flags = regime(run, rows)["flags"]
            if any(math.isnan(v) for v in numbers.values()) or (set(row["expect"]) & {"ci_lo_above", "ci_hi_below",
                                                                                       "ci_overlaps"}
                                                                 and "lo" not in numbers):
                verdict = "not testable here (needs two or more trials)"
            elif flags and row["value"] in REGIME_BOUND:
                verdict = "not testable here (run outside its design regime)"
            else:
                verdict = "reproduced" if _meets(numbers, row["expect"]) else "not reproduced"
            out.append({**entry, "ours": shown + ("" if arm == "dlfp" else f" (arm {arm})"),
                        "source": source_line(run), "verdict": verdict,
                        "note": row.get("note", "")})
    return pd.DataFrame(out, columns=["claim", "paper", "ours", "source", "expected (declared)", "verdict", "note"])


def verdict_kinds(claims: pd.DataFrame) -> pd.Series:
    """Each row's verdict without its parenthesised reason: reproduced, not reproduced, not testable here."""
    return claims.verdict.str.split(" (", regex=False).str[0]
