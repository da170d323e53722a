"""Virtual time against real time on the modeled targets: how fast, and how close.

``dlfp bench virtual speed``: one unit of each modeled target of the capacity study (the committed run
under ``--study``, its recorded design: the same rate and workload), run here twice, side by side: in
real time (a fresh engine that sleeps each modeled step) and in virtual time (:mod:`dlfp.sim.virtual`).
It reports each one's wall time, the whole unit (engine start and warm-up included) and the replay
alone, and their ratios, with the P99 ITL and P99 TTFT each gave. Targets: at least 20x on the 8B and
32B targets, 5x on 0.6B.

``dlfp bench virtual modes``: the committed real-time capacity runs' units of a few arms (every load,
every trial) replayed in virtual time under their recorded designs (:mod:`dlfp.trials.replay`), then,
per target, the median relative difference of P99 ITL and P99 TTFT over the same units, and each arm's
capacity per SLO level in both modes. The real-time side is the committed traces: made on the hosts
and at the commits their manifests name, whose Python ran vLLM's engine core, where virtual time
prices it from an engine-core profile: ``gpu-node`` (a GPU server's), or, with ``--engine measured``, one
fitted to each target's own real-time run (the simulating host's, as that run saw it), which separates what
the loop model gets wrong from what the host assumption changes. Targets: median difference at most 5% on
P99 ITL and 10% on P99 TTFT. The report keeps each unit's P99s in both clocks and each replayed unit's
file checksums (a regeneration of the replay is checked against them; the replay's run folders are not
committed).

``dlfp bench virtual explanations``: the explanations table (which candidate explanation of the paper's
negative result reproduces its pattern in the model) from the committed real-time runs and from the same
runs replayed in virtual time: whether the paper's mechanism shows where it shows today.

Each writes ``report.json`` under ``--out`` and prints its tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlfp.trials.schema import Manifest

STUDY = Path("data/runs/study-capacity")
MODELED = ("a100-qwen3-0.6b", "a100-qwen3-8b", "a100-qwen3-32b", "a100-qwen3-8b-tp2", "h200-qwen3-8b",
           "h200-qwen3-8b-field")
SPEED_ARM = "stock_0.6"
"""The unit the speed benchmark times: stock at a middle load, where steps mix prefill and decode."""
MODE_ARMS = ("stock", "mbt-512", "dlfp", "dlfp-slo")
"""The arms the modes benchmark replays: stock, the best single fixed budget, the paper's law and the SLO
controller (each held arm at both SLO levels), every load."""
ITL_TARGET, TTFT_TARGET = 0.05, 0.10


def provenance(allow_dirty: bool) -> dict[str, Any]:
    """Who made a report: the commit (a dirty tree refused unless allowed), this machine, vLLM, the command
    and the date; the book's captions read it (a speed ratio is this machine's, the rest is not)."""
    import datetime as dt

    from dlfp.harness.telemetry import describe_hardware
    from dlfp.trials.provenance import start_record
    from dlfp.vllm.version import vllm_version

    hw = describe_hardware()
    return {"git": start_record(allow_dirty), "machine": f"{hw.get('cpu_logical_cores')}-core {hw.get('cpu_model')}",
            "vllm": vllm_version(), "argv": ["dlfp", *sys.argv[1:]],
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def _unit(run: Path, arm: str, trial: int) -> tuple[Any, Any, list[Any], int]:
    """The real-time config of ``run`` as it ran (its design's overrides in), the virtual one, the unit's
    workload and its warm-up count."""
    from dlfp.harness import workload
    from dlfp.trials.config import run_config
    from dlfp.trials.replay import virtual_config
    from dlfp.trials.schema import read_manifest

    manifest = read_manifest(run)
    real = run_config(manifest)
    virtual = virtual_config(dataclasses.replace(manifest, config=real.raw))
    requests = workload.generate(real.workload_spec(real.seeds[trial], arm))
    return real, virtual, requests, real.warmup_requests


def _p99s(result: Any) -> dict[str, float]:
    from dlfp import metrics

    s = metrics.summarize(result.trace.requests, result.trace.tokens, np.inf, np.inf)
    return {"itl_p99_ms": float(s["itl_p99_ms"]), "ttft_p99_ms": float(s["ttft_p99_ms"])}


class _Stamp:
    """A progress callback that keeps when the measured replay began (its call with 0, after the warm-up)."""

    def __init__(self) -> None:
        self.t = math.nan

    def __call__(self, n: int) -> None:
        if n == 0:
            self.t = time.monotonic()


def speed(study: Path, targets: Sequence[str], arm: str = SPEED_ARM, trial: int = 0) -> list[dict[str, Any]]:
    """Per target: the unit's wall time in each mode (module docstring)."""
    from dlfp.harness.arm import run_arm
    from dlfp.harness.virtual import run_workload

    rows = []
    for target in targets:
        real, virtual, requests, warm = _unit(study / target, arm, trial)
        with tempfile.TemporaryDirectory(prefix="dlfp-speed-") as tmp:
            began = _Stamp()
            t0 = time.monotonic()
            done = run_arm(real.engine_for(arm), requests, Path(tmp) / "real.jsonl", warmup=requests[:warm],
                           progress=began)
            t1 = time.monotonic()
            sim = run_workload(virtual.engine_for(arm), requests, Path(tmp) / "virtual.jsonl")
            t2 = time.monotonic()
        replay = t1 - began.t
        rows.append({"target": target, "unit": f"trial-{trial}/{arm}", "requests": len(requests),
                     "span_s": float(sim.trace.requests["finish_s"].max()),
                     "real_unit_s": t1 - t0, "real_replay_s": replay, "virtual_s": t2 - t1,
                     "ratio_unit": (t1 - t0) / (t2 - t1), "ratio_replay": replay / (t2 - t1),
                     **{f"real_{k}": v for k, v in _p99s(done).items()},
                     **{f"virtual_{k}": v for k, v in _p99s(sim).items()}})
        print(f"[bench virtual] {target}: real {t1 - t0:.1f} s (replay {replay:.1f} s), virtual {t2 - t1:.2f} s",
              file=sys.stderr, flush=True)
    return rows


MEASURED = "measured"
"""``--engine measured``: each target replayed with the engine-core costs fitted to its own committed
real-time run (:func:`dlfp.sim.enginefit.engine_host_fit_async`): the simulating host's, as that run saw it."""


def measured_engine(run: Path, names: Sequence[str], out: Path) -> Path:
    """The engine-core profile of the committed real-time ``run``'s units of arms ``names``, written to ``out``."""
    import yaml

    from dlfp.analysis.labels import measured_on
    from dlfp.analysis.runs import load_run
    from dlfp.paths import write_text_atomic
    from dlfp.sim.config import DEFAULT_ENGINE
    from dlfp.sim.costmodel import load_engine_host, load_profile
    from dlfp.sim.enginefit import engine_host_fit_async

    recorded = load_run(run, tables=("steps", "tokens"), allow_partial=True)
    units = [u for u in sorted(recorded.tables) if u[1] in set(names)]
    device = load_profile(recorded.manifest.config["engine"]["sim"]["profile"])
    origin = f"{run} ({measured_on(recorded.manifest)}, on {(recorded.manifest.hardware or {})['cpu_model']})"
    fitted = engine_host_fit_async([recorded.tables[u]["steps"] for u in units],
                                   [recorded.tables[u]["tokens"] for u in units], device, f"measured-{run.name}",
                                   origin, load_engine_host(DEFAULT_ENGINE), DEFAULT_ENGINE)
    write_text_atomic(out, yaml.safe_dump(fitted, sort_keys=False))
    return out


def unit_itl(run: Path, manifest: Manifest, trial: int, arm: str) -> tuple[float, float]:
    """(P50, P99) ITL in ms of one finished unit of ``run``, read from its own verified tables (a capacity
    run's hundreds of other units are not read)."""
    from dlfp import metrics
    from dlfp.trials.runfolder import read_table

    unit = manifest.unit(trial, arm)
    folder = run / unit.label
    tables = {t: read_table(folder / f"{t}.parquet", t, unit.files[f"{t}.parquet"]) for t in ("requests", "tokens")}
    s = metrics.summarize(tables["requests"], tables["tokens"], math.inf, math.inf)
    return float(s["itl_p50_ms"]), float(s["itl_p99_ms"])


def modes(study: Path, targets: Sequence[str], out: Path, arms: Sequence[str] = MODE_ARMS,
          workers: int | None = None, allow_dirty: bool = False, engine: str | None = None) -> dict[str, Any]:
    """Replay, compare per unit and per capacity (module docstring); ``engine``: the replays' engine-core
    profile (default ``gpu-node``), or :data:`MEASURED`."""
    from dlfp.analysis.runs import load_run
    from dlfp.studies.capacity import capacity_table, load_points, point_rows
    from dlfp.trials import replay
    from dlfp.trials.armid import ArmId
    from dlfp.trials.runner import run_trials
    from dlfp.trials.schema import read_manifest

    committed, _ = load_points(study)
    units, capacities, files = [], [], {}
    for target in targets:
        names = [a["name"] for a in read_manifest(study / target).config["arms"]
                 if ArmId.parse(a["name"]).base in arms]
        host = str(measured_engine(study / target, names, out / f"{target}.engine.yaml")) if engine == MEASURED \
            else engine
        config = replay.prepare(study / target, out / target, names, allow_dirty, host)
        manifest = run_trials(config, out / target, allow_dirty=allow_dirty, workers=workers)
        files[target] = {u.label: u.files for u in manifest.units}
        virtual = point_rows(load_run(out / target), target)
        real = committed[(committed.target == target) & committed.unit_arm.isin(set(virtual.unit_arm))]
        key = ["level", "unit_arm", "trial"]
        both = real.merge(virtual, on=key, suffixes=("_real", "_virtual"))
        for metric in ("itl_p99_ms", "ttft_p99_ms"):
            both[f"{metric}_diff"] = both[f"{metric}_virtual"] / both[f"{metric}_real"] - 1
        recorded = read_manifest(study / target)
        for mode, run, m in (("real", study / target, recorded), ("virtual", out / target, manifest)):
            medians = {(k, a): unit_itl(run, m, k, a)[0] for k, a in set(zip(both.trial, both.unit_arm, strict=True))}
            both[f"itl_p50_ms_{mode}"] = [medians[(k, a)] for k, a in zip(both.trial, both.unit_arm, strict=True)]
        units.append(both.assign(target=target))
        cap = {mode: capacity_table(points).set_index(["level", "arm"])["capacity_rps"]
               for mode, points in (("real", real), ("virtual", virtual))}
        capacities.append(pd.DataFrame(cap).reset_index().assign(target=target))
    per_unit = pd.concat(units, ignore_index=True)
    caps = pd.concat(capacities, ignore_index=True)
    caps["diff"] = caps["virtual"] / caps["real"] - 1
    distinct = per_unit.drop_duplicates(["target", "unit_arm", "trial"])
    summary = distinct.groupby("target", sort=False).agg(
        units=("unit_arm", "size"),
        itl_p99_median_abs_diff=("itl_p99_ms_diff", lambda d: float(np.median(np.abs(d)))),
        itl_p99_median_diff=("itl_p99_ms_diff", "median"),
        ttft_p99_median_abs_diff=("ttft_p99_ms_diff", lambda d: float(np.median(np.abs(d)))),
        ttft_p99_median_diff=("ttft_p99_ms_diff", "median"))
    columns = ["target", "unit_arm", "trial", "load_real", "itl_p50_ms_real", "itl_p50_ms_virtual", "itl_p99_ms_real",
               "itl_p99_ms_virtual", "ttft_p99_ms_real", "ttft_p99_ms_virtual"]
    return {"study": str(study), "arms": list(arms), "engine": engine or "gpu-node",
            "summary": summary.reset_index().to_dict("records"), "capacity": caps.to_dict("records"),
            "units": distinct[columns].to_dict("records"), "files": files,
            "targets": {"itl_p99": ITL_TARGET, "ttft_p99": TTFT_TARGET}}


EXPLANATION_ARMS = ("dlfp", "dlfp-completion", "dlfp-abs-target")
"""The baselines arms the explanations table compares with stock (:data:`dlfp.studies.explanations.VARIANTS`)."""


def explanation_replays(baselines: Path, explained: Path, out: Path
                        ) -> list[tuple[Path, Path, tuple[str, ...] | None, str | None]]:
    """(recorded run, replay folder, arms or all, engine-core profile or the default) of every run the
    explanations table reads: the baselines study's paper targets (its table's arms) and the explanations
    study's runs, the fast-host counterfactual with its engine-core counterpart."""
    from dlfp.studies.plans import FAST_HOST_ENGINE, PAPER_TARGETS

    jobs: list[tuple[Path, Path, tuple[str, ...] | None, str | None]] = [
        (baselines / t, out / "study-baselines" / t, EXPLANATION_ARMS, None) for t in PAPER_TARGETS]
    jobs += [(explained / f"{kind}-{t}", out / "study-explanations" / f"{kind}-{t}", None,
              FAST_HOST_ENGINE if kind == "fast-host" else None) for kind in ("fast-host", "rare-stalls")
             for t in PAPER_TARGETS]
    return jobs


def explanations(baselines: Path, explained: Path, out: Path, workers: int | None = None,
                 allow_dirty: bool = False) -> dict[str, Any]:
    """The explanations table (:mod:`dlfp.studies.explanations`) from the committed real-time runs and from
    the same runs replayed in virtual time (the fast-host counterfactual with its engine-core counterpart,
    :data:`dlfp.studies.plans.FAST_HOST_ENGINE`): does the paper's mechanism show where it shows today?"""
    from dlfp.studies import explanations as expl
    from dlfp.trials import replay
    from dlfp.trials.runner import run_trials

    for src, dst, arms, engine in explanation_replays(baselines, explained, out):
        run_trials(replay.prepare(src, dst, arms, allow_dirty, engine), dst, allow_dirty=allow_dirty, workers=workers)
    real = expl.from_runs(baselines, explained)
    virtual = expl.from_runs(out / "study-baselines", out / "study-explanations")
    return {"real": real.reset_index(names="variant").to_dict("records"),
            "virtual": virtual.reset_index(names="variant").to_dict("records"),
            "verdict": {"real": expl.verdict(real), "virtual": expl.verdict(virtual)}}


def main(argv: list[str] | None = None) -> int:
    from dlfp.paths import write_json_atomic

    ap = argparse.ArgumentParser(prog="dlfp bench virtual", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    for name, text in (("speed", "one unit per modeled target in both modes, timed side by side"),
                       ("modes", "the committed real-time capacity units replayed in virtual time, compared")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--study", type=Path, default=STUDY, help="the committed capacity study (real time)")
        p.add_argument("--targets", nargs="+", default=list(MODELED), choices=MODELED)
        p.add_argument("--out", type=Path, required=True, help="folder for report.json (and modes' runs)")
        p.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded)")
    sub.choices["modes"].add_argument("--arms", nargs="+", default=list(MODE_ARMS))
    sub.choices["modes"].add_argument("--workers", type=int, default=None)
    sub.choices["modes"].add_argument("--engine", default=None,
                                      help="the replays' engine-core profile (default gpu-node), or 'measured': each "
                                           "target's fitted to its own real-time run")
    ex = sub.add_parser("explanations", help="the explanations table from the committed real-time runs and from "
                        "the same runs in virtual time")
    ex.add_argument("--baselines", type=Path, default=Path("data/runs/study-baselines"))
    ex.add_argument("--explanations", type=Path, default=Path("data/runs/study-explanations"))
    ex.add_argument("--out", type=Path, required=True)
    ex.add_argument("--workers", type=int, default=None)
    ex.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded)")
    args = ap.parse_args(argv)
    made = provenance(args.allow_dirty)  # before any work: a dirty tree is refused here
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "explanations":
        report = {**explanations(args.baselines, args.explanations, args.out, args.workers, args.allow_dirty),
                  "provenance": made}
        write_json_atomic(args.out / "report.json", report)
        for mode in ("real", "virtual"):
            table = pd.DataFrame(report[mode]).to_string(index=False)
            print(f"{mode} time:\n{table}\n{report['verdict'][mode]}")
        return 0
    if args.what == "speed":
        rows = speed(args.study, args.targets)
        write_json_atomic(args.out / "report.json", {"study": str(args.study), "units": rows, "provenance": made})
        table = pd.DataFrame(rows)[["target", "span_s", "real_unit_s", "real_replay_s", "virtual_s", "ratio_unit",
                                    "ratio_replay", "real_itl_p99_ms", "virtual_itl_p99_ms", "real_ttft_p99_ms",
                                    "virtual_ttft_p99_ms"]]
        print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        return 0
    report = {**modes(args.study, args.targets, args.out, args.arms, args.workers, args.allow_dirty, args.engine),
              "provenance": made}
    write_json_atomic(args.out / "report.json", report)
    print(pd.DataFrame(report["summary"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(pd.DataFrame(report["capacity"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0
