"""``dlfp study``: which study and which of its run folders (:mod:`dlfp.studies.plans` builds them), run
one after another (each resumes like any other run), then, for the capacity study, its tables.

``dlfp cluster study`` takes the same arguments (:func:`study_arguments`) and plan (:func:`study_plan`), and
runs each run folder as one task of a SLURM job array.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlfp.studies import plans
from dlfp.studies.plans import (
    CAPACITY_REQUESTS,
    CLOCKS,
    REGIME_TRIALS,
    REQUESTS,
    STABILITY_TIMES,
    STUDIES,
    TRIALS,
    capacity,
    stability,
    with_clock,
)
from dlfp.trials.config import TrialConfig, parse_config
from dlfp.trials.progress import arm_names


def study_arguments(ap: argparse.ArgumentParser) -> None:
    """Which study and which of its run folders: ``dlfp study``'s arguments, which ``dlfp cluster study``
    takes too."""
    ap.add_argument("study", choices=sorted(STUDIES))
    ap.add_argument("--out", type=Path, required=True, help="root folder; one run folder per entry below it")
    ap.add_argument("--trials", type=int, default=None,
                    help=f"trials per run (default {TRIALS}; stability: the default design's own)")
    ap.add_argument("--requests", type=int, default=None,
                    help=f"requests per unit (default {REQUESTS}; capacity {CAPACITY_REQUESTS}; stability: the "
                         "default design's own)")
    ap.add_argument("--times", type=int, default=STABILITY_TIMES,
                    help=f"stability only: repetitions of the default paired design (at least {STABILITY_TIMES})")
    ap.add_argument("--only", nargs="+", help="run only these entries (folder names)")
    ap.add_argument("--goal-trials", type=int, default=None,
                    help="capacity only: trials for the arms the controller goal compares (its controllers, the "
                         "fixed budgets, stock); the other arms run --trials")


def study_plan(args: argparse.Namespace) -> list[tuple[Path, TrialConfig]]:
    """The run folders and configs :func:`study_arguments` ask for (before ``--only``)."""
    goal = getattr(args, "goal_trials", None)
    if goal is not None and args.study != "capacity":
        raise ValueError(f"--goal-trials belongs to the capacity study, not to {args.study}")
    if args.study == "stability":
        if args.times < STABILITY_TIMES:
            raise ValueError(f"--times {args.times}: a stability table needs at least {STABILITY_TIMES} repetitions")
        return stability(args.trials, args.requests, args.times)
    if args.times != STABILITY_TIMES:
        raise ValueError(f"--times belongs to the stability study, not to {args.study}")
    requests = args.requests or (CAPACITY_REQUESTS if args.study == "capacity" else REQUESTS)
    trials = TRIALS if args.trials is None else args.trials
    if goal is not None:
        if isinstance(goal, bool) or not isinstance(goal, int) or not max(trials, REGIME_TRIALS) <= goal <= 1000:
            raise ValueError(f"--goal-trials {goal!r}: allowed an integer from the run's trials "
                             f"({max(trials, REGIME_TRIALS)}) to 1000")
        return capacity(trials, requests, goal_trials=goal)
    return STUDIES[args.study](trials, requests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp study", description=plans.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    study_arguments(ap)
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    ap.add_argument("--tables", action="store_true",
                    help="capacity only: rewrite the tables and their stamp from the traces under --out, run nothing")
    ap.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded)")
    ap.add_argument("--clock", choices=CLOCKS, default="real",
                    help="the modeled targets' clock (default real: the committed runs'); virtual runs them as "
                         "discrete-event simulations, deterministic and many times faster")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes for virtual-time units (default: this machine's cores)")
    ap.add_argument("--skip-measured", action="store_true",
                    help="only the modeled targets (with --clock virtual: the whole study that needs no engine)")
    ap.add_argument("--no-tables", action="store_true",
                    help="capacity: leave the tables to a later --tables (a job array's tasks run folders apart)")
    args = ap.parse_args(argv)
    if args.tables:
        if args.study != "capacity":
            ap.error("--tables rewrites the capacity study's tables; the other studies keep none")
        if not args.out.is_dir():
            ap.error(f"--out {args.out}: no such folder")
        return _write_capacity_tables(args.out)
    plan = [(d, parse_config(with_clock(c.raw, args.clock))) for d, c in study_plan(args)]
    if args.only:
        unknown = sorted(set(args.only) - {str(d) for d, _ in plan})
        if unknown:
            raise ValueError(f"--only {unknown}: not in the {args.study} plan {[str(d) for d, _ in plan]}")
        plan = [(d, c) for d, c in plan if str(d) in args.only]
    if args.skip_measured:
        plan = [(d, c) for d, c in plan if c.engine.sim is not None]
    for folder, cfg in plan:
        arms = f"{len(cfg.arms)} arms ({', '.join(cfg.arm_names)})" if args.list else arm_names(cfg.arm_names)
        fewer = sorted({a.trials for a in cfg.arms if a.trials is not None})
        some = (f" ({sum(a.trials is not None for a in cfg.arms)} of them in the first "
                f"{'/'.join(map(str, fewer))} trials only)" if fewer else "")
        print(f"{args.out / folder}: {cfg.name}, {cfg.unit_count} units: {len(cfg.seeds)} trials x {arms}{some}",
              file=sys.stderr)
    if args.list:
        return 0
    from dlfp.trials.runner import run_trials

    for folder, cfg in plan:
        workers = args.workers if cfg.engine.virtual else None
        manifest = run_trials(cfg, args.out / folder, allow_dirty=args.allow_dirty, workers=workers)
        print(f"{args.out / folder}: {manifest.status}")
    return _write_capacity_tables(args.out) if args.study == "capacity" and not args.no_tables else 0


def _write_capacity_tables(root: Path) -> int:
    from dlfp.studies.capacity import write_tables

    for path in write_tables(root, progress=lambda line: print(line, file=sys.stderr, flush=True)):
        print(f"wrote {path}", file=sys.stderr)
    return 0
