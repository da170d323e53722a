"""Benchmark: how punctually the open-loop client sends requests at a high arrival rate.

Lateness = actual send instant minus scheduled arrival. The target is an in-process token
source that streams each request's tokens 1 ms apart, a stand-in for an engine fast enough
that the client's own event loop is what is measured; many requests are in flight at once,
so the dispatcher competes with token handling as it does in a real trial.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import numpy as np

from dlfp.harness.driver import drive
from dlfp.harness.workload import Request, WorkloadSpec, generate


class FastTarget:
    """Streams ``output_len`` tokens, one per millisecond."""

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        for i in range(request.output_len):
            await asyncio.sleep(0.001)
            yield [i]


def measure(rate_rps: float, n_requests: int, output_len: int, seed: int = 0) -> dict[str, float]:
    """Send lateness percentiles (ms) of one open-loop replay."""
    spec = WorkloadSpec.from_dict({
        "n_requests": n_requests, "rate_rps": rate_rps, "seed": seed, "vocab_size": 32000,
        "classes": [{"name": "c", "weight": 1, "prompt_len": 16, "output_len": output_len}]})
    trace = asyncio.run(drive(FastTarget(), generate(spec)))
    late = np.asarray(trace.lateness_s) * 1e3
    return {"p50_ms": float(np.percentile(late, 50)), "p99_ms": float(np.percentile(late, 99)),
            "max_ms": float(late.max()), "ok": float((trace.requests.status == "ok").mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench driver", description=__doc__)
    ap.add_argument("--rate", type=float, default=200.0, help="arrivals per second (default 200)")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--output-len", type=int, default=20, help="tokens per request (1 ms apart)")
    args = ap.parse_args(argv)
    r = measure(args.rate, args.requests, args.output_len)
    in_flight = args.rate * args.output_len / 1000.0
    print(f"{args.requests} requests at {args.rate:g}/s (~{in_flight:.0f} in flight): send lateness "
          f"p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, max {r['max_ms']:.3f} ms "
          f"({r['ok']:.0%} ok; target p99 <= 1 ms)")
    return 0
