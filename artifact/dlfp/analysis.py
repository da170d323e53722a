"""From a run folder's raw traces to the paper-style paired table (no cached numbers).

Everything here is recomputed from ``requests``/``tokens`` Parquet tables: per trial and
arm the summary of :func:`dlfp.metrics.summarize`, exact token accounting against the saved
workload, output agreement between arms, and per-trial paired reductions with a Student's t
and a bootstrap confidence interval across trials.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp import metrics, stats, workload
from dlfp.runfolder import MANIFEST
from dlfp.trialconfig import ARMS, parse_config

HEADLINE = ("itl_p99_ms", "ttft_p99_ms")


@dataclass
class RunData:
    """A run folder loaded: manifest, config and per-trial, per-arm tables."""

    path: Path
    manifest: dict[str, Any]
    tables: dict[tuple[int, str], dict[str, pd.DataFrame]]
    workloads: dict[int, list[workload.Request]]

    @property
    def trials(self) -> list[int]:
        """Trials with both arms complete, in order."""
        done = {k for k, _ in self.tables}
        return sorted(k for k in done if all((k, arm) in self.tables for arm in ARMS))


def load_run(path: str | Path, tables: tuple[str, ...] = ("requests", "tokens", "steps")) -> RunData:
    """Load every complete unit of a run folder; a missing or corrupt file is a clear error."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{path} is not a run folder: no {MANIFEST}")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    loaded: dict[tuple[int, str], dict[str, pd.DataFrame]] = {}
    workloads: dict[int, list[workload.Request]] = {}
    for unit in manifest["units"]:
        if unit["status"] != "complete":
            continue
        k, arm = unit["trial"], unit["arm"]
        unit_dir = path / f"trial-{k}" / arm
        try:
            loaded[(k, arm)] = {t: pd.read_parquet(unit_dir / f"{t}.parquet") for t in tables}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{unit_dir}: cannot read trace ({exc})") from exc
        if k not in workloads:
            workloads[k] = workload.load(path / f"trial-{k}" / "workload.parquet")
    return RunData(path, manifest, loaded, workloads)


def accounting(requests: pd.DataFrame, tokens: pd.DataFrame, wl: list[workload.Request]) -> dict[str, int]:
    """Exact token accounting: every request's prompt and output counts against the workload."""
    want = {r.request_id: (r.prompt_len, r.output_len) for r in wl}
    got = requests.set_index("request_id")
    per_req = tokens.groupby("request_id").size()
    bad_prompt = sum(int(got.at[rid, "prompt_len"]) != p for rid, (p, _) in want.items() if rid in got.index)
    bad_output = sum(
        got.at[rid, "status"] == "ok"
        and not (int(got.at[rid, "output_len"]) == o == int(per_req.get(rid, 0)))
        for rid, (_, o) in want.items() if rid in got.index
    )
    return {"n_expected": len(want), "n_recorded": int(got.index.isin(list(want)).sum()),
            "prompt_mismatches": int(bad_prompt), "output_mismatches": int(bad_output)}


def trial_rows(run: RunData) -> pd.DataFrame:
    """One row per (trial, arm): summary metrics, accounting and output agreement."""
    config = parse_config(run.manifest["config"])
    rows = []
    for k in run.trials:
        token_ids = {
            arm: run.tables[(k, arm)]["tokens"].groupby("request_id")["token_id"].apply(list).to_dict()
            for arm in ARMS
        }
        agree = metrics.output_agreement(token_ids["stock"], token_ids["dlfp"])
        for arm in ARMS:
            t = run.tables[(k, arm)]
            summary = metrics.summarize(t["requests"], t["tokens"], config.ttft_slo_s, config.tpot_slo_s)
            rows.append({"trial": k, "seed": config.seeds[k], "arm": arm, **summary,
                         **accounting(t["requests"], t["tokens"], run.workloads[k]),
                         "agreement_rate": agree["rate"], "mismatched": len(agree["mismatched"])})
    return pd.DataFrame(rows)


def reductions(rows: pd.DataFrame, metric: str) -> list[float]:
    """Per-trial paired reductions of ``metric``, stock -> DLFP, in percent, in trial order."""
    wide = rows.pivot(index="trial", columns="arm", values=metric)
    return [stats.paired_reduction(s, d) for s, d in zip(wide["stock"], wide["dlfp"], strict=True)]


def paired(rows: pd.DataFrame, metric: str) -> dict[str, Any]:
    """Per-trial reductions of ``metric`` (stock -> DLFP, %), their mean and CIs across trials."""
    reductions_pct = reductions(rows, metric)
    out: dict[str, Any] = {"metric": metric, "reductions_pct": reductions_pct,
                           "mean_pct": float(sum(reductions_pct) / len(reductions_pct)) if reductions_pct else math.nan}
    if len(reductions_pct) >= 2:
        _, out["t_lo"], out["t_hi"] = stats.t_ci(reductions_pct)
        _, out["boot_lo"], out["boot_hi"] = stats.bootstrap_ci(reductions_pct)
    return out


def paper_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The paper's table: per trial P99 ITL and TTFT per arm, reductions, SLO, failures, agreement."""
    wide = rows.pivot(index="trial", columns="arm")
    table = pd.DataFrame({
        "seed": wide[("seed", "stock")],
        "P99 ITL stock (ms)": wide[("itl_p99_ms", "stock")],
        "P99 ITL DLFP (ms)": wide[("itl_p99_ms", "dlfp")],
        "ITL reduction (%)": reductions(rows, "itl_p99_ms"),
        "P99 TTFT stock (ms)": wide[("ttft_p99_ms", "stock")],
        "P99 TTFT DLFP (ms)": wide[("ttft_p99_ms", "dlfp")],
        "TTFT change (%)": [100.0 * (d - s) / s for s, d in
                            zip(wide[("ttft_p99_ms", "stock")], wide[("ttft_p99_ms", "dlfp")], strict=True)],
        "SLO stock": wide[("slo_compliance", "stock")],
        "SLO DLFP": wide[("slo_compliance", "dlfp")],
        "failures": wide[("n_failed", "stock")] + wide[("n_failed", "dlfp")],
        "output agreement": wide[("agreement_rate", "stock")],
    })
    table.index.name = "trial"
    return table


def format_report(run: RunData) -> str:
    """The text ``dlfp analyze`` prints."""
    rows = trial_rows(run)
    if rows.empty:
        return f"{run.path}: no trial has both arms complete yet (missing: {run.manifest.get('missing')})"
    lines = [
        f"run {run.path} ({run.manifest.get('name')}, status {run.manifest.get('status')})",
        source_line(run),
        "",
        paper_table(rows).to_string(float_format=lambda x: f"{x:.2f}"),
        "",
    ]
    for metric in HEADLINE:
        p = paired(rows, metric)
        line = f"{metric}: mean reduction {p['mean_pct']:.1f}%"
        if "t_lo" in p:
            line += (f", paired 95% CI (Student's t, {len(p['reductions_pct']) - 1} df) "
                     f"[{p['t_lo']:.1f}%, {p['t_hi']:.1f}%], "
                     f"bootstrap [{p['boot_lo']:.1f}%, {p['boot_hi']:.1f}%]")
        lines.append(line)
    acc = rows[["prompt_mismatches", "output_mismatches"]].sum()
    lines.append(f"token accounting: {int(acc.prompt_mismatches)} prompt and {int(acc.output_mismatches)} "
                 f"output mismatches over {int(rows.n_expected.sum())} request-arms")
    return "\n".join(lines)


def interval_divergence(steps: pd.DataFrame) -> float:
    """Median relative gap between the two feedback signals over mixed steps.

    For step ``j``: the scheduler-call interval that follows it (``s_(j+1) - s_j``, the
    paper's signal) against its completion cadence (``c_j - c_(j-1)``, the completion-timed
    signal). Near 0 in synchronous engines; under async scheduling the first measures a
    neighbouring step, the mechanism the paper blames for its negative result.
    """
    s = steps.sort_values("step")
    sched = s.schedule_t.shift(-1) - s.schedule_t
    comp = s.complete_t - s.complete_t.shift(1)
    mixed = (s.prefill_tokens > 0) & (s.decode_reqs > 0) & sched.notna() & (comp > 0)
    if not mixed.any():
        return math.nan
    return float(((sched[mixed] - comp[mixed]).abs() / comp[mixed]).median())


def generalization_table(runs: list[RunData]) -> pd.DataFrame:
    """One row per run (model shape, TP size): the DLFP effect and the signal divergence."""
    out = []
    for run in runs:
        rows = trial_rows(run)
        if rows.empty:
            continue
        engine = run.manifest["config"]["engine"]
        sim = engine.get("sim")
        itl, ttft = paired(rows, "itl_p99_ms"), paired(rows, "ttft_p99_ms")
        div = [interval_divergence(run.tables[(k, "dlfp")]["steps"]) for k in run.trials]
        out.append({
            "run": run.path.name, "model": engine["model"],
            "device": f"{sim.get('profile', 'a100')} (modeled)" if sim is not None else _measured_device(run),
            "TP": sim.get("tp", 1) if sim is not None else engine.get("tensor_parallel_size", 1),
            "DLFP variant": ", ".join(f"{k}={v}" for k, v in sorted(run.manifest["config"].get("dlfp", {}).items())
                                      if k != "itl_slo_ms") or "paper's law",
            "trials": len(run.trials),
            "P99 ITL stock (ms)": rows[rows.arm == "stock"].itl_p99_ms.mean(),
            "P99 ITL DLFP (ms)": rows[rows.arm == "dlfp"].itl_p99_ms.mean(),
            "ITL reduction (%)": itl["mean_pct"],
            "ITL CI lo (%)": itl.get("t_lo", math.nan), "ITL CI hi (%)": itl.get("t_hi", math.nan),
            "TTFT reduction (%)": ttft["mean_pct"],
            "signal divergence": float(pd.Series(div).median()),
            "source": source_line(run),
        })
    return pd.DataFrame(out)


def _measured_device(run: RunData) -> str:
    gpus = [g.get("name") for g in run.manifest.get("hardware", {}).get("gpus") or []]
    return gpus[0] if gpus else "CPU"


def source_line(run: RunData) -> str:
    """Where a run's numbers come from: measured (machine, vLLM build) or simulated (profile)."""
    sim = run.manifest.get("config", {}).get("engine", {}).get("sim")
    if sim is not None:
        mode = "async" if sim.get("async_scheduling", True) else "sync"
        return (f"simulated: cost profile {sim.get('profile', 'a100')} (TP {sim.get('tp', 1)}, {mode} scheduling), "
                f"real vLLM {run.manifest.get('versions', {}).get('vllm')} scheduler")
    hw = run.manifest.get("hardware", {})
    gpus = [g.get("name") for g in hw.get("gpus") or []]
    where = ", ".join(gpus) if gpus else f"{hw.get('cpu_model', 'CPU')} ({hw.get('cpu_logical_cores')} cores)"
    return f"measured: {where}, vLLM {run.manifest.get('versions', {}).get('vllm')}"
