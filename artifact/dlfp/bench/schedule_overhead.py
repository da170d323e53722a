"""Benchmark: DLFP ``schedule()`` per-call time over stock vLLM's, side by side in one run.

Both schedulers run the same steps on a weightless model config with fabricated model
outputs (:mod:`dlfp.vllm.direct`), interleaved in rounds so that machine drift hits both
alike; only the ``schedule()`` call is timed. Two scenarios at ``--running`` requests:
``decode`` (all running requests decoding) and ``mixed`` (the same plus a long prompt
being prefilled, so DLFP caps every step).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from dlfp.vllm.direct import fabricate_output, make_request, make_scheduler

LONG_PROMPT = 4000


def _prepare(cls: type, running: int, mixed: bool) -> Any:
    s = make_scheduler(cls, async_scheduling=False, max_num_seqs=running + 8)
    for i in range(running):
        s.add_request(make_request(f"d{i}", 32, 7000))
    _step(s)  # prefill all decoders in one step
    if mixed:
        s.add_request(make_request("long0", LONG_PROMPT, 1))
    return s


def _step(s: Any) -> float:
    t0 = time.perf_counter()
    out = s.schedule()
    dt = time.perf_counter() - t0
    s.update_from_output(out, fabricate_output(s, out))
    return dt


def _refill(s: Any, mixed: bool, counter: list[int]) -> None:
    """Keep one long prompt waiting or prefilling in the mixed scenario."""
    if mixed and not s.waiting and all(not r.is_prefill_chunk for r in s.running):
        counter[0] += 1
        s.add_request(make_request(f"long{counter[0]}", LONG_PROMPT, 1))


def measure(running: int, scenario: str, rounds: int, steps_per_round: int) -> dict[str, float]:
    """Median and mean ``schedule()`` seconds per call for stock and DLFP, and their ratios."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from dlfp.vllm import DLFPScheduler

    mixed = scenario == "mixed"
    arms = {"stock": _prepare(Scheduler, running, mixed), "dlfp": _prepare(DLFPScheduler, running, mixed)}
    samples: dict[str, list[float]] = {name: [] for name in arms}
    counters = {name: [0] for name in arms}
    for _ in range(rounds):
        for name, s in arms.items():
            for _ in range(steps_per_round):
                _refill(s, mixed, counters[name])
                samples[name].append(_step(s))
    res: dict[str, float] = {}
    for name, xs in samples.items():
        res[f"{name}_median_us"] = statistics.median(xs) * 1e6
        res[f"{name}_mean_us"] = statistics.fmean(xs) * 1e6
    res["ratio_median"] = res["dlfp_median_us"] / res["stock_median_us"]
    res["ratio_mean"] = res["dlfp_mean_us"] / res["stock_mean_us"]
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench schedule", description=__doc__)
    ap.add_argument("--running", type=int, default=64, help="running requests (default 64)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps-per-round", type=int, default=100)
    ap.add_argument("--scenario", choices=("decode", "mixed", "both"), default="both")
    args = ap.parse_args(argv)
    scenarios = ("decode", "mixed") if args.scenario == "both" else (args.scenario,)
    print(f"schedule() per call, {args.running} running requests, "
          f"{args.rounds} x {args.steps_per_round} interleaved steps per arm")
    for scenario in scenarios:
        r = measure(args.running, scenario, args.rounds, args.steps_per_round)
        print(f"{scenario:>6}: stock median {r['stock_median_us']:.1f} us, "
              f"dlfp median {r['dlfp_median_us']:.1f} us -> ratio {r['ratio_median']:.3f} "
              f"(means {r['stock_mean_us']:.1f} / {r['dlfp_mean_us']:.1f} us, "
              f"ratio {r['ratio_mean']:.3f})")
    return 0
