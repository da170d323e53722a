"""Benchmark: does replaying a workload on a reused engine measure what a fresh engine measures?

The capacity study replays an arm's loads one after another on one engine (``reuse_engine``,
:func:`dlfp.harness.arm.run_arms`), warmed by a short discarded workload first and reset between
workloads. This runs one unit three ways, side by side in one run, ``--repeats`` times each:

* *cold*: a fresh engine, the workload first (how every other study runs a unit);
* *warm*: a fresh engine, the warm-up workload, then the workload;
* *reused*: one engine, the warm-up, then the workload again and again (as the study does).

A cold and a warm replay run before each of the reused engine's replays (while it waits idle, as
between a study's units), so machine drift hits all three alike. Reported per metric (P99 ITL, P99
TTFT, P50 ITL): each condition's mean, and Welch's 95% interval of the difference of warm from cold
(what a fresh engine's first requests cost) and of reused from warm (what reuse itself changes:
nothing measurable where that interval holds zero).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from scipy import stats as sps

from dlfp import metrics

METRICS = ("itl_p99_ms", "ttft_p99_ms", "itl_p50_ms")


def _config(target: str, requests: int, load: float) -> Any:
    """The target's stock engine and the capacity study's request mix at ``load``, from a pre-flight."""
    from dlfp.studies.plans import MODELED_CLASSES, target_config
    from dlfp.trials.config import parse_config

    raw = target_config(target, {"trials": 1, "workload": {"n_requests": requests, "classes": MODELED_CLASSES},
                                 "design": {"kind": "capacity", "load": load, "enforce": False}})
    return parse_config(raw)


def _summary(result: Any) -> dict[str, float]:
    s = metrics.summarize(result.trace.requests, result.trace.tokens, math.inf, math.inf)
    return {m: float(s[m]) for m in METRICS}


def measure(target: str, repeats: int, requests: int, load: float) -> dict[str, Any]:
    """Run the comparison (module docstring); returns the samples and the design it ran."""
    from dlfp.harness import workload
    from dlfp.harness.arm import Job, run_arm, run_arms
    from dlfp.trials.arms import REFERENCE
    from dlfp.trials.design import derive
    from dlfp.trials.prediction import workload_facts
    from dlfp.trials.preflight import run_preflight

    config = _config(target, requests, load)
    facts = workload_facts(config.raw)
    pre = run_preflight(config.engine_for(REFERENCE), facts, 4, int(config.workload.get("vocab_size", 32000)),
                        "reuse benchmark")
    config = config.with_overrides(derive(config.design, pre.measured, facts, config.raw).overrides)
    spec, reqs = config.engine_for(REFERENCE), workload.generate(config.workload_spec(0))
    warmup = reqs[:config.warmup_requests]
    runs: dict[str, list[dict[str, float]]] = {"cold": [], "warm": [], "reused": []}
    with tempfile.TemporaryDirectory() as tmp:

        def fresh_pair(j: int) -> None:
            """Before the reused engine's replay ``j``: one cold and one warm fresh-engine replay."""
            runs["cold"].append(_summary(run_arm(spec, reqs, Path(tmp) / f"cold-{j}.jsonl")))
            warm: list[Any] = []
            run_arms(spec, [Job(reqs, lambda: None)], Path(tmp) / f"warm-{j}.jsonl", lambda _, r: warm.append(r),
                     warmup=warmup)
            runs["warm"].append(_summary(warm[0]))

        def done(j: int, result: Any) -> None:
            runs["reused"].append(_summary(result))
            print(f"  round {j + 1}/{repeats} done", flush=True)

        jobs = [Job(reqs, functools.partial(fresh_pair, j)) for j in range(repeats)]
        run_arms(spec, jobs, Path(tmp) / "reused.jsonl", done, warmup=warmup)
    return {"target": target, "rate_rps": config.workload["rate_rps"], "requests": len(reqs), **runs}


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's 95% interval of mean(b) - mean(a) (NaN with fewer than two samples a side)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        d = statistics.fmean(b) - statistics.fmean(a)
        return d, d
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf(0.975, df)) * se
    d = statistics.fmean(b) - statistics.fmean(a)
    return d - half, d + half


def report(res: dict[str, Any]) -> list[str]:
    lines = [f"{res['target']}: {res['requests']} requests at {res['rate_rps']:g} req/s, {len(res['cold'])} "
             "replays each: cold (fresh engine), warm (fresh engine after a warm-up), reused (one engine)"]
    for m in METRICS:
        cold, warm, reused = ([x[m] for x in res[k]] for k in ("cold", "warm", "reused"))
        means = ", ".join(f"{k} {statistics.fmean(v):.2f} (sd {statistics.pstdev(v):.2f})"
                          for k, v in (("cold", cold), ("warm", warm), ("reused", reused)))
        (wlo, whi), (rlo, rhi) = welch(cold, warm), welch(warm, reused)
        lines.append(f"  {m}: {means}; warm - cold 95% CI [{wlo:.2f}, {whi:.2f}] ms; "
                     f"reused - warm 95% CI [{rlo:.2f}, {rhi:.2f}] ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench reuse", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="a100-qwen3-0.6b",
                    help="cpu-tiny or a modeled target of the studies (default a100-qwen3-0.6b)")
    ap.add_argument("--repeats", type=int, default=3, help="replays per condition (cold, warm, reused)")
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--load", type=float, default=0.6, help="stock's predicted prefill load (default 0.6)")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats must be at least 2 (an interval needs two samples a side)")
    for line in report(measure(args.target, args.repeats, args.requests, args.load)):
        print(line)
    return 0
