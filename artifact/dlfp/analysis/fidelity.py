"""The modeled accelerator against the real engine on one workload: the fit's per-step error on the real
steps, the noise floor no (prefill, decodes) model can beat, median step time per step kind, and P99 ITL /
TTFT per arm, real against modeled (and against a virtual-time replay where one was made).

``dlfp bench sim fidelity`` (:mod:`dlfp.bench.sim_fidelity`) makes the runs and the report; the results
chapter reads the same comparison, so it lives here, below both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlfp.analysis.runs import load_run, trial_rows
from dlfp.sim.costmodel import load_profile
from dlfp.sim.stepfit import relative_errors, step_durations


def _step_kinds(steps: pd.DataFrame) -> pd.DataFrame:
    d = step_durations(steps)
    kind = np.where(d.prefill_tokens == 0, "decode-only", np.where(d.decode_reqs == 0, "prefill-only", "mixed"))
    return d.assign(kind=kind)


def noise_floor(steps: pd.DataFrame, bucket: int = 32) -> float:
    """Median relative deviation of each step from the median of its look-alikes (same decode
    count, prefill tokens within ``bucket``): what no model of these two features can beat."""
    key = [steps.prefill_tokens // bucket, steps.decode_reqs]
    typical = steps.groupby(key).step_s.transform("median")
    return float(np.median(np.abs(steps.step_s / typical - 1)))


def compare_runs(real_dir: Path, modeled_dir: Path, profile_path: Path) -> dict[str, Any]:
    """Side-by-side numbers of the same workload on the real engine and the modeled one."""
    fit = load_profile(profile_path).fit
    real, modeled = load_run(real_dir), load_run(modeled_dir)
    rows = {"real": trial_rows(real), "modeled": trial_rows(modeled)}
    report: dict[str, Any] = {"arms": {}, "step_time_p50_ms": {}}
    for arm in ("stock", "dlfp"):
        real_steps = pd.concat([_step_kinds(real.tables[(k, arm)]["steps"]) for k in real.trials])
        model_steps = pd.concat([_step_kinds(modeled.tables[(k, arm)]["steps"]) for k in modeled.trials])
        err = relative_errors(fit, real_steps)
        per_arm: dict[str, Any] = {"fit_step_error_p50": float(np.median(err)),
                                   "fit_step_error_p90": float(np.percentile(err, 90)),
                                   "noise_floor_p50": noise_floor(real_steps)}
        for metric in ("itl_p99_ms", "itl_p50_ms", "ttft_p99_ms"):
            r = float(rows["real"][rows["real"].arm == arm][metric].mean())
            m = float(rows["modeled"][rows["modeled"].arm == arm][metric].mean())
            per_arm[metric] = {"real": r, "modeled": m, "rel_diff": m / r - 1}
        report["arms"][arm] = per_arm
        for kind in ("decode-only", "mixed", "prefill-only"):
            r = real_steps[real_steps.kind == kind].step_s
            m = model_steps[model_steps.kind == kind].step_s
            if len(r) and len(m):
                report["step_time_p50_ms"][f"{arm} {kind}"] = {
                    "real": float(r.median() * 1e3), "modeled": float(m.median() * 1e3),
                    "rel_diff": float(m.median() / r.median() - 1), "n_real": len(r), "n_modeled": len(m)}
    return report


def compared(out: Path) -> dict[str, Any]:
    """:func:`compare_runs` of the real run under ``out`` with its real-time replay and, where it was made,
    its virtual-time replay (``virtual``): what the report and the book's table hold."""
    profile = out / "profile.yaml"
    report = compare_runs(out / "real", out / "modeled", profile)
    if (out / "virtual" / "manifest.json").is_file():
        report["virtual"] = compare_runs(out / "real", out / "virtual", profile)
    return report


def fidelity_table(report: dict[str, Any]) -> pd.DataFrame:
    """One row per compared quantity: real, modeled, relative difference (and the target); with a virtual
    replay in the report (``virtual``), its value and difference beside the real-time one's."""
    table = _table(report)
    if "virtual" in report:
        other = _table({**report, **report["virtual"]})
        table.insert(3, "virtual", other["modeled"])
        table.insert(4, "virtual difference", other["difference"].where(other["real"].notna()))
        table = table.rename(columns={"modeled": "modeled (real time)", "difference": "difference (real time)"})
    return table


def _table(report: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for arm, a in report["arms"].items():
        rows.append({"quantity": f"{arm}: fit's per-step error on the real steps, p50", "real": None,
                     "modeled": None, "difference": a["fit_step_error_p50"], "target": "<= 5%"})
        rows.append({"quantity": f"{arm}: noise floor of any (prefill, decodes) model, p50", "real": None,
                     "modeled": None, "difference": a["noise_floor_p50"], "target": ""})
        for metric, target in (("itl_p99_ms", "within 10%"), ("itl_p50_ms", ""), ("ttft_p99_ms", "")):
            m = a[metric]
            rows.append({"quantity": f"{arm}: {metric}", "real": m["real"], "modeled": m["modeled"],
                         "difference": m["rel_diff"], "target": target})
    for key, m in report["step_time_p50_ms"].items():
        rows.append({"quantity": f"median step time (ms), {key}", "real": m["real"], "modeled": m["modeled"],
                     "difference": m["rel_diff"], "target": ""})
    return pd.DataFrame(rows)
