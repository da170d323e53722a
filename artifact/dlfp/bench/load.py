"""Benchmark: the open-loop client and vLLM's engine core under sustained load, nothing lost.

By default 10,000 requests of the CPU default mix at ten times its arrival rate, against the
modeled executor (simulated: vLLM 0.32's real engine core, scheduler (DLFP on) and output
processing; model execution replaced by the ``a100`` cost profile's step times for the
Qwen3-0.6B shape), through the same arm runner as a trial (:func:`dlfp.harness.arm.run_arm`).
Reported: the request statuses; every request's tokens against the workload
(:func:`dlfp.analysis.runs.accounting`: produced == requested, exactly); send lateness p50/p99
(how punctual the client stays); peak RSS of the client and of the engine-core process
(psutil, sampled); wall time; and every socket those processes listen on (anything beyond
loopback is a failure). Exit status 1 when a token, a request or that promise was lost.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

GIB = float(2**30)
RATE_FACTOR = 10


@dataclass
class ProcessWatch:
    """Peak RSS of this process and of its descendants by kind, and their listening sockets,
    sampled on a thread every ``interval_s`` until :meth:`stop`."""

    interval_s: float
    kinds: dict[int, str] = field(default_factory=dict)
    """Each pid's kind as last seen (a spawned engine core is ``python`` until it sets its title)."""
    peak_by_pid: dict[int, int] = field(default_factory=dict)
    listening: set[tuple[int, str, int]] = field(default_factory=set)
    samples: int = 0

    @property
    def peak_rss(self) -> dict[str, int]:
        """Peak RSS (bytes) by kind of process."""
        peaks: dict[str, int] = {}
        for pid, peak in self.peak_by_pid.items():
            peaks[self.kinds[pid]] = max(peaks.get(self.kinds[pid], 0), peak)
        return peaks

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlfp-load-watch", daemon=True)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.sample(me)
            self._stop.wait(self.interval_s)

    def sample(self, me: psutil.Process) -> None:
        for proc in [me, *me.children(recursive=True)]:
            try:
                self.kinds[proc.pid] = "client" if proc.pid == me.pid else _kind(proc)
                self.peak_by_pid[proc.pid] = max(self.peak_by_pid.get(proc.pid, 0), proc.memory_info().rss)
                connections = proc.net_connections if hasattr(proc, "net_connections") else proc.connections
                for conn in connections(kind="inet"):  # psutil < 6 names it connections
                    if conn.status == psutil.CONN_LISTEN:
                        self.listening.add((proc.pid, conn.laddr.ip, conn.laddr.port))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self.samples += 1


def _kind(proc: psutil.Process) -> str:
    title = " ".join(proc.cmdline()) or proc.name()
    for kind in ("EngineCore", "Worker"):
        if kind in title:
            return f"engine core ({kind})" if kind == "EngineCore" else f"vLLM {kind}"
    return f"other ({proc.name()})"




def main(argv: list[str] | None = None) -> int:
    from dlfp.trials.config import CPU_DEFAULT

    default_rate = RATE_FACTOR * CPU_DEFAULT["workload"]["rate_rps"]
    ap = argparse.ArgumentParser(prog="dlfp bench load", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=default_rate,
                    help=f"arrivals per second (default {default_rate:g}: {RATE_FACTOR}x the CPU default)")
    ap.add_argument("--model", default="qwen3-0.6b", help="model shape (default qwen3-0.6b)")
    ap.add_argument("--profile", default="a100", help="cost profile of the modeled executor (default a100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-interval", type=float, default=0.5, help="RSS sampling period, seconds")
    args = ap.parse_args(argv)
    if args.requests < 1 or not args.rate > 0 or not args.sample_interval > 0:
        ap.error("--requests, --rate and --sample-interval must be positive")
    return run(args.requests, args.rate, args.model, args.profile, args.seed, args.sample_interval)


def run(n_requests: int, rate: float, model: str, profile: str, seed: int, sample_interval_s: float) -> int:
    """Run the benchmark and print its report; 0 when nothing was lost."""
    from dlfp import metrics
    from dlfp.analysis.runs import accounting
    from dlfp.harness.arm import run_arm
    from dlfp.harness.engine import EngineSpec
    from dlfp.harness.workload import WorkloadSpec, generate
    from dlfp.trials.config import CPU_DEFAULT
    from dlfp.vllm.version import vllm_version

    requests = generate(WorkloadSpec.from_dict({**CPU_DEFAULT["workload"], "n_requests": n_requests,
                                                "rate_rps": rate, "seed": seed}))
    spec = EngineSpec(model=model, dtype="bfloat16", sim={"profile": profile}, dlfp={"enabled": True})
    print(f"dlfp bench load: {n_requests} requests at {rate:g}/s (CPU default mix, seed {seed}) on the modeled "
          f"executor (simulated: profile {profile}, {model}; vLLM {vllm_version()} engine core and scheduler, "
          f"DLFP on); {os.cpu_count()} logical cores, load average {os.getloadavg()[0]:.1f} at the start",
          flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dlfp-load-") as tmp, ProcessWatch(sample_interval_s) as watch:
        result = run_arm(spec, requests, Path(tmp) / "steps.jsonl")
    wall_s = time.monotonic() - started
    trace = result.trace
    acc = accounting(trace.requests, trace.tokens, requests)
    slo = CPU_DEFAULT["slo"]
    summary = metrics.summarize(trace.requests, trace.tokens, slo["ttft_ms"] / 1e3, slo["tpot_ms"] / 1e3)
    late = metrics.percentiles([s * 1e3 for s in trace.lateness_s])
    requested = sum(r.output_len for r in requests)
    exact = (acc["n_recorded"] == acc["n_expected"] == summary["n_ok"]
             and acc["output_mismatches"] == acc["prompt_mismatches"] == 0 and len(trace.tokens) == requested)
    listening = sorted(f"{watch.kinds[pid]} on {ip}:{port}" for pid, ip, port in watch.listening)
    exposed = [f"{watch.kinds[pid]} on {ip}:{port}" for pid, ip, port in watch.listening
               if not ipaddress.ip_address(ip).is_loopback]
    rss = ", ".join(f"{kind} {peak / GIB:.2f} GiB" for kind, peak in watch.peak_rss.items())
    print(f"  requests: {summary['n_requests']} recorded of {acc['n_expected']}, {summary['n_ok']} ok, "
          f"{summary['n_failed']} failed, {summary['n_cancelled']} cancelled")
    print(f"  tokens: {len(trace.tokens)} received of {requested} requested; accounting: "
          f"{acc['output_mismatches']} output and {acc['prompt_mismatches']} prompt mismatches "
          f"({'exact' if exact else 'NOT EXACT'})")
    print(f"  send lateness: p50 {late['p50']:.3f} ms, p99 {late['p99']:.3f} ms, max {late['max']:.3f} ms")
    print(f"  peak RSS: {rss} ({watch.samples} samples, every {sample_interval_s:g} s)")
    print(f"  replay {summary['duration_s']:.1f} s for {max(r.arrival_s for r in requests):.1f} s of arrivals, "
          f"{len(result.steps)} engine steps, ITL p99 {summary['itl_p99_ms']:.1f} ms (simulated); "
          f"wall {wall_s:.1f} s with engine start; load average {os.getloadavg()[0]:.1f} at the end")
    print("  listening sockets: " + (", ".join(listening) if listening else "none")
          + (f"; BEYOND LOOPBACK: {', '.join(exposed)}" if exposed else ""))
    if not exact or exposed:
        print("dlfp bench load: FAILED: " + ("requests or tokens were lost or duplicated" if not exact else
                                             "a process listens beyond loopback"), file=sys.stderr)
        return 1
    return 0
