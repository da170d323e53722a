"""Benchmark the modeled accelerator: what it costs per step, and how close it comes to a real engine.

``dlfp bench sim overhead``: drives the modeled executor under vLLM's real scheduler in the
synchronous loop (no engine, so nothing else competes) and reports, per step, the wall time
from ``execute_model`` to the sampled output minus the modeled host and GPU time: the
executor's own cost (planning, hashing tokens, the stream hand-off and wake-up). Target:
<= 0.5 ms per step.

``dlfp bench sim fidelity``: calibrates a profile from a measured CPU run (``dlfp
calibrate``), then runs one *other* workload twice, on the real CPU engine and on the
modeled executor with that profile (synchronous, as the CPU engine is), and compares them
side by side: the fit's per-step error on the new workload's real steps, the median step
time per step kind, and P99 ITL / P99 TTFT per arm. Targets: per-step error p50 <= 5%,
P99 ITL within 10%. Both runs are run folders (resumable); the report is ``report.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dlfp.analysis.fidelity import compare_runs, compared, fidelity_table, noise_floor

__all__ = ["compare_runs", "compared", "executor_overhead", "fidelity", "fidelity_table", "format_fidelity",
           "noise_floor"]

OVERHEAD_TARGET_MS = 0.5


def executor_overhead(steps: int, profile: str, model: str, running: int, seed: int = 0) -> dict[str, float]:
    """Per-step executor overhead (ms) over ``steps`` synchronous steps of a mixed load.

    ``running`` requests decode throughout (each replaced when it finishes) and a
    1,000-2,000-token prompt arrives every 20 steps, so steps are decode-only and mixed.
    """
    from dlfp.sim.standalone import make_executor, make_scheduler
    from dlfp.vllm.direct import make_request

    rng = np.random.default_rng(seed)
    executor = make_executor({"profile": profile, "async_scheduling": False}, model, budget=2048)
    scheduler = make_scheduler(executor, num_blocks=65536)
    n = 0

    def add(prompt_len: int, max_tokens: int) -> None:
        nonlocal n
        scheduler.add_request(make_request(f"r{n}", prompt_len, max_tokens))
        n += 1

    for _ in range(running):
        add(int(rng.integers(32, 256)), int(rng.integers(50, 200)))
    overhead: list[float] = []
    try:
        for k in range(steps):
            if k % 20 == 0:
                add(int(rng.integers(1000, 2000)), 4)
            while len(scheduler.running) + len(scheduler.waiting) < running:
                add(int(rng.integers(32, 256)), int(rng.integers(50, 200)))
            out = scheduler.schedule()
            t0 = time.monotonic()
            result = executor.execute_model(out)
            if result is None:  # a non-empty step: its output comes from the modeled stream
                result = executor.sample_tokens(None)
                step = executor.timeline[-1]
                overhead.append(time.monotonic() - t0 - step.host_s - (step.end_t - step.start_t))
            scheduler.update_from_output(out, result)
    finally:
        executor.shutdown()
    ms = np.asarray(overhead) * 1e3
    return {"steps": len(ms), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max())}


def fidelity(calibration_run: Path, config_path: Path, out: Path, allow_dirty: bool = False) -> dict[str, Any]:
    """Calibrate, run the validation workload real and modeled, compare (module docstring)."""
    from dlfp.analysis.calibration import calibrate_engine, calibrate_run
    from dlfp.book.notebook import config_with_overrides
    from dlfp.paths import write_json_atomic, write_text_atomic
    from dlfp.sim.costmodel import load_profile
    from dlfp.trials.config import CPU_DEFAULT, REAL_TIME_ONLY, merge, parse_config, run_config
    from dlfp.trials.runner import run_trials
    from dlfp.trials.schema import read_manifest

    real_cfg = config_with_overrides(str(config_path), {})
    if real_cfg.engine.sim is not None:
        raise ValueError(f"{config_path}: the validation config must run the real engine (no engine.sim)")
    profile = calibrate_run(calibration_run, name=f"fitted-{Path(calibration_run).name}")
    out.mkdir(parents=True, exist_ok=True)
    # The virtual replay also prices the engine core's host work, which the real-time one spends for real:
    # an engine-core profile fitted to the same run (dlfp.sim.enginefit.engine_host_fit).
    profile_path, engine_path = out / "profile.yaml", out / "engine.yaml"
    if profile_path.is_file():  # the replays made with it are resumed, not redone: keep it, if it is this fit
        kept = load_profile(profile_path)
        if kept.fit.coefficients != profile.fit.coefficients:
            raise ValueError(f"{profile_path} holds another fit of {calibration_run} than this code makes: its replays "
                             "are another calibration's; use another --out")
    else:
        write_text_atomic(profile_path, profile.to_yaml())
    if not engine_path.is_file():
        write_text_atomic(engine_path, yaml.safe_dump(calibrate_engine(calibration_run), sort_keys=False))
    dtype_bytes = 4 if real_cfg.engine.dtype == "float32" else 2
    sim = {"profile": str(profile_path), "async_scheduling": False, "dtype_bytes": dtype_bytes}
    print(f"[bench sim] real run of {config_path} ...", file=sys.stderr, flush=True)
    run_trials(real_cfg, out / "real", progress=True, allow_dirty=allow_dirty)
    # The modeled runs replay exactly what the real one ran: its design, fixed.
    ran = run_config(read_manifest(out / "real")).raw
    fixed = {"design": {"kind": "fixed", "enforce": False}}
    modeled_cfg = parse_config(merge(ran, {"name": f"{real_cfg.name}-modeled", "engine": {"sim": sim}, **fixed}))
    print(f"[bench sim] modeled run of {config_path} (real time) ...", file=sys.stderr, flush=True)
    run_trials(modeled_cfg, out / "modeled", progress=True, allow_dirty=allow_dirty)
    virtual = {**sim, "engine": str(engine_path), "clock": "virtual"}
    virtual_cfg = parse_config(merge(ran, {"name": f"{real_cfg.name}-virtual", "engine": {"sim": virtual},
                                           **fixed, **{k: CPU_DEFAULT[k] for k in REAL_TIME_ONLY}}))
    print(f"[bench sim] modeled run of {config_path} (virtual time) ...", file=sys.stderr, flush=True)
    run_trials(virtual_cfg, out / "virtual", progress=True, allow_dirty=allow_dirty)
    report = {"calibration_run": str(calibration_run), "validation_config": str(config_path),
              "fit": profile.fit.to_dict(), **compared(out)}
    write_json_atomic(out / "report.json", report)
    return report


def format_fidelity(report: dict[str, Any]) -> str:
    """The report as plain text (what the command prints)."""
    fit = report["fit"]
    head = (f"calibrated on {report['calibration_run']} ({fit['n_train']} steps; held-out error there "
            f"p50 {fit['heldout_rel_err_p50']:.1%}), validated on {report['validation_config']}")
    table = fidelity_table(report)
    return head + "\n" + table.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    ov = sub.add_parser("overhead", help="executor overhead per modeled step")
    ov.add_argument("--steps", type=int, default=2000)
    ov.add_argument("--profile", default="h200")
    ov.add_argument("--model", default="qwen3-0.6b")
    ov.add_argument("--running", type=int, default=32, help="decoding requests kept running")
    fi = sub.add_parser("fidelity", help="modeled vs real CPU engine on a workload not used for calibration")
    fi.add_argument("--calibrate", type=Path, default=Path("data/runs/cpu-default"), help="measured run to fit")
    fi.add_argument("--config", type=Path, default=Path("configs/cpu-fidelity.yaml"), help="validation workload")
    fi.add_argument("--out", type=Path, default=Path("data/runs/local/sim-fidelity"))
    fi.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded)")
    args = ap.parse_args(argv)
    if args.what == "overhead":
        if args.steps < 100 or args.running < 1:
            ap.error("--steps must be >= 100 and --running >= 1")
        r = executor_overhead(args.steps, args.profile, args.model, args.running)
        print(f"modeled executor, {r['steps']} synchronous steps ({args.profile}, {args.model}, "
              f"{args.running} decoding + a long prompt every 20 steps): overhead beyond the modeled time "
              f"p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, mean {r['mean_ms']:.3f} ms, "
              f"max {r['max_ms']:.3f} ms (target <= {OVERHEAD_TARGET_MS} ms)")
        return 0
    print(format_fidelity(fidelity(args.calibrate, args.config, args.out, args.allow_dirty)))
    return 0
