"""``dlfp``: the artifact's command line.

Subcommands import their heavy dependencies (vLLM, pandas) only when they run, so
``dlfp --help`` and ``dlfp stats`` answer at once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

INTERRUPTED = 130
"""Exit code of a Ctrl-C (128 + SIGINT), as shells report it."""

TRIAL_EXIT_CODES = """\
exit codes:
  0    the run is complete
  1    an arm failed (e.g. the engine core died); the manifest says "failed" and why
  2    bad input: an invalid config, or a run folder that is refused
  130  Ctrl-C (SIGINT); the manifest says "interrupted", interrupted_by "SIGINT"
  143  SIGTERM (SLURM at the time limit, scancel, kill); "interrupted", "SIGTERM"
  137  SIGKILL (no handler runs: the manifest still says "running")
Every case keeps the finished arms; the same command resumes with the missing ones. The
engine core and its workers exit with this process, SIGKILL included (one still starting
up exits when it builds its scheduler)."""


def _paired_ci(args: argparse.Namespace) -> int:
    from dlfp.analysis.stats import t_ci

    mean, lo, hi = t_ci(args.values, confidence=args.confidence)
    print(f"n={len(args.values)} mean {mean:.2f}%  {args.confidence:.0%} paired t CI "
          f"[{lo:.2f}%, {hi:.2f}%] (Student's t, {len(args.values) - 1} df)")
    return 0


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _trial(args: argparse.Namespace) -> int:
    from dlfp.harness.lifeline import EngineCoreDied
    from dlfp.trials.config import load_config, parse_config
    from dlfp.trials.runner import run_trials

    config = load_config(args.config) if args.config else parse_config({})
    try:
        manifest = run_trials(config, args.out, progress=not args.quiet, allow_dirty=args.allow_dirty,
                              workers=args.workers)
    except EngineCoreDied as exc:
        print(f"dlfp: error: {exc}; finished arms are kept and {args.out / 'manifest.json'} (status "
              "failed) names the missing ones: rerun the same command to resume", file=sys.stderr)
        return 1
    print(f"{args.out}: {manifest.status}")
    return 0


def _analyze(args: argparse.Namespace) -> int:
    from dlfp.analysis.report import format_report
    from dlfp.analysis.runs import load_run

    print(format_report(load_run(args.run_dir, allow_partial=args.partial)))
    return 0


def _import_bench(args: argparse.Namespace) -> int:
    from dlfp.analysis.bench_serve import load_bench_json
    from dlfp.metrics import summarize

    requests, tokens, meta = load_bench_json(args.result)
    summary = summarize(requests, tokens, args.ttft_slo_ms / 1000.0, args.tpot_slo_ms / 1000.0)
    print(f"{args.result} ({meta.get('source')}, model {meta.get('model_id')}, "
          f"rate {meta.get('request_rate')})")
    for key, value in summary.items():
        print(f"  {key:>24}: {value:.2f}" if isinstance(value, float) else f"  {key:>24}: {value}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from dlfp.analysis.calibration import calibrate_run
    from dlfp.paths import write_text_atomic
    from dlfp.sim.stepfit import MODEL

    if args.out is not None and args.out.exists() and not args.force:
        raise ValueError(f"{args.out} exists; refusing to overwrite it (pass --force)")
    profile = calibrate_run(args.run_dir, arms=args.arms, seed=args.seed, name=args.name)
    f = profile.fit
    print(f"{args.run_dir}: {MODEL}, {f.n_train} steps fitted, {f.n_test} held out (seed {f.seed})")
    print(f"  a = {f.a * 1e3:.4f} ms   e = {f.e * 1e3:.4f} ms/prefill step   b = {f.b * 1e6:.4f} us/prefill token   "
          f"c = {f.c * 1e3:.4f} ms/decode   d = {f.d * 1e9:.5f} ns/prefill token^2")
    print(f"  held-out relative error: p50 {f.heldout_p50:.1%}, p90 {f.heldout_p90:.1%}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out, profile.to_yaml())
        print(f"  profile written to {args.out} (use it as engine.sim.profile, with async_scheduling: false)")
    return 0


def _gpu_check(args: argparse.Namespace) -> int:
    from dlfp.cluster.gpucheck import main

    return main(args.rest)


def _gpu_calibrate(args: argparse.Namespace) -> int:
    from dlfp.sim.gpucal import main

    return main(args.rest)


def _bench_sim(args: argparse.Namespace) -> int:
    from dlfp.bench.sim_fidelity import main

    return main(args.rest)


def _bench_virtual(args: argparse.Namespace) -> int:
    from dlfp.bench.virtual_time import main

    return main(args.rest)


def _plan(args: argparse.Namespace) -> int:
    from dlfp.studies.deploy import main

    return main(args.rest)


def _study(args: argparse.Namespace) -> int:
    from dlfp.studies.command import main

    return main(args.rest)


def _pipeline(args: argparse.Namespace) -> int:
    from dlfp.book.pipeline import main

    return main(args.rest)


def _cluster_study(args: argparse.Namespace) -> int:
    from dlfp.cluster.array import main

    return main(args.rest)


def _cluster_submit(args: argparse.Namespace) -> int:
    from dlfp.cluster.submit import main

    return main(args.rest)


def _bench_schedule(args: argparse.Namespace) -> int:
    from dlfp.bench.schedule_overhead import main

    return main(args.rest)


def _bench_load(args: argparse.Namespace) -> int:
    from dlfp.bench.load import main

    return main(args.rest)


def _bench_reuse(args: argparse.Namespace) -> int:
    from dlfp.bench.reuse import main

    return main(args.rest)


def _bench_driver(args: argparse.Namespace) -> int:
    from dlfp.bench.driver_fidelity import main

    return main(args.rest)


def _bench_timed(args: argparse.Namespace) -> int:
    from dlfp.bench.timed import main

    return main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlfp", description="Decode-Latency Feedback Prefill artifact")
    sub = ap.add_subparsers(dest="command", required=True)

    stats = sub.add_parser("stats", help="statistics helpers").add_subparsers(dest="what", required=True)
    ci = stats.add_parser("paired-ci", help="paired t confidence interval of per-trial reductions (%%)")
    ci.add_argument("values", type=float, nargs="+", help="per-trial reductions, e.g. 24.8 30.1 28.2")
    ci.add_argument("--confidence", type=float, default=0.95)
    ci.set_defaults(func=_paired_ci)

    trial = sub.add_parser("trial", help="run (or resume) paired stock/DLFP trials on a real engine",
                           epilog=TRIAL_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    trial.add_argument("config", nargs="?", help="YAML config (default: the CPU defaults)")
    trial.add_argument("--out", required=True, type=Path, help="run folder, e.g. data/runs/<id>")
    trial.add_argument("--quiet", action="store_true",
                       help="no progress lines (the engines' own output goes to <out>.engine.log either way)")
    trial.add_argument("--allow-dirty", action="store_true",
                       help="run even if the code differs from its git commit (recorded in the manifest)")
    trial.add_argument("--workers", type=positive_int, default=None,
                       help="processes for a virtual-time run's units (default: this machine's cores; "
                            "results do not depend on it); real engines run one at a time")
    trial.set_defaults(func=_trial)

    analyze = sub.add_parser("analyze", help="paper-style paired table from a run folder's raw traces")
    analyze.add_argument("run_dir", type=Path)
    analyze.add_argument("--partial", action="store_true",
                         help="read an unfinished run's finished arms (labelled partial) instead of refusing it")
    analyze.set_defaults(func=_analyze)

    imp = sub.add_parser("import-bench", help="summarize `vllm bench serve --save-detailed` JSON "
                         "with this artifact's metric definitions")
    imp.add_argument("result", type=Path)
    imp.add_argument("--ttft-slo-ms", type=float, default=5000.0)
    imp.add_argument("--tpot-slo-ms", type=float, default=100.0)
    imp.set_defaults(func=_import_bench)

    cal = sub.add_parser("calibrate", help="fit a step-time profile to a measured synchronous run's step records")
    cal.add_argument("run_dir", type=Path, help="a run folder of a real (not simulated) synchronous engine")
    cal.add_argument("--out", type=Path, help="write the fitted profile (YAML) here, for engine.sim.profile")
    cal.add_argument("--arms", nargs="+", default=["stock", "dlfp"], choices=["stock", "dlfp"])
    cal.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    cal.add_argument("--name", help="profile name (default: fitted-<run folder>)")
    cal.add_argument("--force", action="store_true", help="overwrite --out")
    cal.set_defaults(func=_calibrate)

    sim = sub.add_parser("sim", help="modeled-accelerator tools").add_subparsers(dest="what", required=True)
    gpucal = sim.add_parser("gpu-calibrate", help="measure forward passes on a GPU and write a cost profile",
                            add_help=False)
    gpucal.set_defaults(func=_gpu_calibrate, delegates=True)

    gchk = sub.add_parser("gpu-check", help="on a GPU node (~10 min): install check, short paired trials on "
                          "Qwen3-0.6B/8B, the proxy error measured per step, a measured cost profile",
                          add_help=False)
    gchk.set_defaults(func=_gpu_check, delegates=True)

    study = sub.add_parser("study", help="baselines, sensitivity and explanations studies (many runs)", add_help=False)
    study.set_defaults(func=_study, delegates=True)
    plan = sub.add_parser("plan", help="which setting carries the most load within your ITL and TTFT SLOs: a "
                          "capacity sweep for your model, GPU profile and workload in virtual time (simulated)",
                          add_help=False)
    plan.set_defaults(func=_plan, delegates=True)

    pipe = sub.add_parser("pipeline", help="execute the notebooks with papermill and build the book", add_help=False)
    pipe.set_defaults(func=_pipeline, delegates=True)

    cluster = sub.add_parser("cluster", help="the notebooks as SLURM batch jobs").add_subparsers(dest="what",
                                                                                                 required=True)
    csub = cluster.add_parser("submit", help="submit verify -> trials -> generalization -> book as chained jobs "
                              "(--dry-run: print the job list)", add_help=False)
    csub.set_defaults(func=_cluster_submit, delegates=True)
    cstudy = cluster.add_parser("study", help="a study's modeled targets in virtual time as one SLURM job array",
                                add_help=False)
    cstudy.set_defaults(func=_cluster_study, delegates=True)

    bench = sub.add_parser("bench", help="benchmarks (ratios measured side by side)")
    bench_sub = bench.add_subparsers(dest="what", required=True)
    sched = bench_sub.add_parser("schedule", help="DLFP schedule() per-call time over stock vLLM", add_help=False)
    sched.set_defaults(func=_bench_schedule, delegates=True)
    drv = bench_sub.add_parser("driver", help="open-loop client send lateness at a high rate", add_help=False)
    drv.set_defaults(func=_bench_driver, delegates=True)
    load = bench_sub.add_parser("load", help="10,000 requests at 10x the CPU default rate on the modeled executor: "
                                "nothing lost, peak RSS, send lateness", add_help=False)
    load.set_defaults(func=_bench_load, delegates=True)
    reuse = bench_sub.add_parser("reuse", help="one unit on fresh engines and on one reused engine: the same P99s?",
                                 add_help=False)
    reuse.set_defaults(func=_bench_reuse, delegates=True)
    bsim = bench_sub.add_parser("sim", help="modeled executor: overhead per step, and modeled vs real CPU engine",
                                add_help=False)
    bsim.set_defaults(func=_bench_sim, delegates=True)
    bvirt = bench_sub.add_parser("virtual", help="virtual against real time on the modeled targets: speed, and "
                                 "P99s and capacity over the same units", add_help=False)
    bvirt.set_defaults(func=_bench_virtual, delegates=True)
    timed = bench_sub.add_parser("timed", help="a command's duration (in a fresh clone with --fresh-clone), recorded "
                                 "in data/timings/ where the pages read it", add_help=False)
    timed.set_defaults(func=_bench_timed, delegates=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "delegates", False):
        args.rest = rest  # options of a delegated command (pipeline, bench ...) go to its own parser
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:  # bad input, refused run folders included
        print(f"dlfp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in dlfp trial (dlfp.trials.interrupts.Interrupted)
        print(f"dlfp: interrupted ({str(exc) or 'SIGINT'}); finished units are kept, rerun the same command to resume",
              file=sys.stderr)
        return getattr(exc, "exit_code", INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
