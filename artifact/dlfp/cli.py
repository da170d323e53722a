"""``dlfp``: the artifact's command line.

Subcommands import their heavy dependencies (vLLM, pandas) only when they run, so
``dlfp --help`` and ``dlfp stats`` answer at once.
"""

from __future__ import annotations

import argparse
import sys


def _paired_ci(args: argparse.Namespace) -> int:
    from dlfp.stats import t_ci

    mean, lo, hi = t_ci(args.values, confidence=args.confidence)
    print(f"n={len(args.values)} mean {mean:.2f}%  {args.confidence:.0%} paired t CI "
          f"[{lo:.2f}%, {hi:.2f}%] (Student's t, {len(args.values) - 1} df)")
    return 0


def _bench_schedule(args: argparse.Namespace) -> int:
    from dlfp.bench.schedule_overhead import main

    return main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlfp", description="Decode-Latency Feedback Prefill artifact")
    sub = ap.add_subparsers(dest="command", required=True)

    stats = sub.add_parser("stats", help="statistics helpers").add_subparsers(dest="what", required=True)
    ci = stats.add_parser("paired-ci", help="paired t confidence interval of per-trial reductions (%%)")
    ci.add_argument("values", type=float, nargs="+", help="per-trial reductions, e.g. 24.8 30.1 28.2")
    ci.add_argument("--confidence", type=float, default=0.95)
    ci.set_defaults(func=_paired_ci)

    bench = sub.add_parser("bench", help="benchmarks (ratios measured side by side)")
    bench_sub = bench.add_subparsers(dest="what", required=True)
    sched = bench_sub.add_parser("schedule", help="DLFP schedule() per-call time over stock vLLM",
                                 add_help=False)
    sched.add_argument("rest", nargs=argparse.REMAINDER)
    sched.set_defaults(func=_bench_schedule)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"dlfp: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
