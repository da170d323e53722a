"""Benchmark: DLFP's per-step scheduler time over stock vLLM's, side by side in one run.

Four schedulers, stock, DLFP with the paper's law (``dlfp``), with the SLO controller (``dlfp-slo``)
and with the deadline controller (``dlfp-deadline``: the SLO controller's fit, a pass over the prompts
still to prefill, the saturation guard), plus a second stock scheduler (``stock-b``), run the same steps
on a weightless model config with fabricated model outputs (:mod:`dlfp.vllm.direct`), interleaved in
short rounds (two steps per arm by default) in an order that rotates each round, so that machine drift,
other load and the place in the round hit all alike, timed on the thread's CPU clock by default.
Ratios are over the median of both stock schedulers' steps pooled, and the two stock lines are the
benchmark's resolution: two identical schedulers differed by up to 3% here (each has its own memory
layout; the first one built ran fastest), so a ratio within their spread is no measurable overhead.
Two times are taken per step: the ``schedule()`` call, and ``schedule()`` plus ``update_from_output``
(where the SLO controller's step-cost fit runs, so its cost shows there). Two scenarios at
``--running`` requests: ``decode`` (all running requests decoding) and ``mixed`` (the same plus a long
prompt being prefilled, so DLFP caps every step).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlfp.paths import model_path, write_json_atomic
from dlfp.vllm.direct import fabricate_output, make_request, make_scheduler

LONG_PROMPT = 4000


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
"""``cpu``: the calling thread's CPU time, which another process taking the core does not inflate
(the scheduler is single-threaded Python, so its cost is CPU time); ``wall``: elapsed time, which on a
shared machine adds whatever preemption hit the step to whichever arm it hit."""

ARMS: dict[str, dict[str, Any] | None] = {"stock": None, "dlfp": {}, "dlfp-slo": {"controller": "slo"},
                                          "dlfp-deadline": {"controller": "deadline"}, "stock-b": None}
"""Benchmarked schedulers: None is vLLM's own ``Scheduler``, a mapping DLFP's with those parameters."""
STOCK = ("stock", "stock-b")
"""The reference: both stock schedulers' steps pooled (each ratio is over their median)."""


def _prepare(dlfp: dict[str, Any] | None, running: int, mixed: bool) -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    from dlfp.vllm import DLFPScheduler

    cls = Scheduler if dlfp is None else DLFPScheduler
    s = make_scheduler(cls, async_scheduling=False, model=model_path("qwen3-tiny"), max_num_seqs=running + 8,
                       dlfp=dlfp)
    for i in range(running):
        s.add_request(make_request(f"d{i}", 32, 7000))
    _step(s)  # prefill all decoders in one step
    if mixed:
        s.add_request(make_request("long0", LONG_PROMPT, 1))
    return s


def _step(s: Any, clock: Callable[[], float] = time.thread_time) -> tuple[float, float]:
    """Seconds of ``schedule()``, and of it plus ``update_from_output`` (the output made outside both),
    on ``clock``."""
    t0 = clock()
    out = s.schedule()
    t1 = clock()
    produced = fabricate_output(s, out)
    t2 = clock()
    s.update_from_output(out, produced)
    t3 = clock()
    return t1 - t0, (t1 - t0) + (t3 - t2)


def _refill(s: Any, mixed: bool, counter: list[int]) -> None:
    """Keep one long prompt waiting or prefilling in the mixed scenario."""
    if mixed and not s.waiting and all(not r.is_prefill_chunk for r in s.running):
        counter[0] += 1
        s.add_request(make_request(f"long{counter[0]}", LONG_PROMPT, 1))


def round_order(names: list[str], i: int) -> list[str]:
    """The arms' order in round ``i``: each round starts one arm later, so every arm takes every place
    equally often. The place matters by itself (the arm right after stock measured 2-3% slower than the
    one after it, whichever scheduler it was), as much as the overheads measured here."""
    k = i % len(names)
    return names[k:] + names[:k]


def measure(running: int, scenario: str, rounds: int, steps_per_round: int,
            clock: Callable[[], float] = time.thread_time) -> dict[str, dict[str, float]]:
    """Per arm of :data:`ARMS`: median and mean microseconds per step of ``schedule`` and of ``step``
    (schedule plus update), and each median's ratio over both stock schedulers' pooled median."""
    mixed = scenario == "mixed"
    arms = {name: _prepare(dlfp, running, mixed) for name, dlfp in ARMS.items()}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    counters = {name: [0] for name in arms}
    for i in range(rounds):
        for name in round_order(list(arms), i):
            s = arms[name]
            for _ in range(steps_per_round):
                _refill(s, mixed, counters[name])
                samples[name].append(_step(s, clock))
    res: dict[str, dict[str, float]] = {}
    for name, xs in samples.items():
        r = res[name] = {}
        for i, part in enumerate(("schedule", "step")):
            col = [x[i] for x in xs]
            r[f"{part}_median_us"] = statistics.median(col) * 1e6
            r[f"{part}_mean_us"] = statistics.fmean(col) * 1e6
    stock = [x for name in STOCK for x in samples[name]]  # both stock schedulers, pooled
    for r in res.values():
        for i, part in enumerate(("schedule", "step")):
            r[f"{part}_ratio"] = r[f"{part}_median_us"] / (statistics.median(x[i] for x in stock) * 1e6)
    return res


CLOCK_WORDS = {"cpu": "thread CPU time", "wall": "wall-clock time"}
README_ROWS = {"dlfp": "the paper's law (`law`)", "dlfp-slo": "the SLO controller (`slo`)",
               "dlfp-deadline": "the deadline controller (`deadline`)",
               "stock-b": "a second stock scheduler: the benchmark's resolution"}
"""The rows of the plug-in README's overhead table, by arm."""


def overhead_markdown(report: dict[str, Any], path: str) -> str:
    """The plug-in README's section on overhead, from a report ``--out`` wrote at ``path`` (relative to the
    repository): the README holds exactly this text, and the artifact's tests compare the two."""
    commit = str(report["git"]["commit"])[:10]
    lines = [f"Measured with the artifact's benchmark, `dlfp bench schedule --out {path}`, on a {report['machine']} "
             f"(vLLM {report['vllm']}, commit {commit}, {report['date'][:10]}): the scheduler's "
             f"{CLOCK_WORDS[report['clock']]} per step at {report['running']} running requests, the median of "
             f"{report['rounds']} x {report['steps_per_round']} steps per scheduler, interleaved, as a ratio to "
             "stock vLLM's scheduler (two stock schedulers, pooled). *Mixed* steps carry a long prompt's capped "
             "chunk beside the decodes; `update_from_output` is where the SLO controllers' step-cost fit runs.", "",
             "| scheduler | `schedule()`, decode-only | `schedule()`, mixed | with `update_from_output`, decode-only "
             "| with `update_from_output`, mixed |", "| --- | --- | --- | --- | --- |"]
    scenarios = report["scenarios"]
    for arm, label in README_ROWS.items():
        cells = [f"{scenarios[s][arm][f'{part}_ratio']:.3f}" if s in scenarios else "not run"
                 for part in ("schedule", "step") for s in ("decode", "mixed")]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    lines += ["", "Two identical stock schedulers differ by as much as the second one's ratio does, so a ratio that "
              "close to 1 is no overhead this benchmark can tell apart. The ratios are this machine's, not a GPU "
              "node's host's."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench schedule", description=__doc__)
    ap.add_argument("--running", type=int, default=64, help="running requests (default 64)")
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--steps-per-round", type=int, default=2)
    ap.add_argument("--scenario", choices=("decode", "mixed", "both"), default="both")
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="cpu",
                    help="cpu: the thread's CPU time (default; robust to other load), wall: elapsed time")
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the medians and ratios as JSON here, with who made them (the commit, this "
                         "machine, vLLM, the command); the plug-in's README quotes the committed one")
    ap.add_argument("--allow-dirty", action="store_true", help="with --out: allow uncommitted code")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {}
    if args.out is not None:
        from dlfp.bench.virtual_time import provenance

        report = {**provenance(args.allow_dirty), "running": args.running, "rounds": args.rounds,
                  "steps_per_round": args.steps_per_round, "clock": args.clock, "scenarios": {}}
    scenarios = ("decode", "mixed") if args.scenario == "both" else (args.scenario,)
    print(f"scheduler {args.clock} time per step, {args.running} running requests, "
          f"{args.rounds} x {args.steps_per_round} interleaved steps per arm; medians in us, "
          "ratio over the median of both stock schedulers' steps")
    for scenario in scenarios:
        res = measure(args.running, scenario, args.rounds, args.steps_per_round, CLOCKS[args.clock])
        for name, r in res.items():
            print(f"{scenario:>6} {name:>13}: schedule() {r['schedule_median_us']:7.1f} us "
                  f"(ratio {r['schedule_ratio']:.3f}), schedule()+update_from_output() "
                  f"{r['step_median_us']:7.1f} us (ratio {r['step_ratio']:.3f})")
        if args.out is not None:
            report["scenarios"][scenario] = res
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out, report)
        print(f"report: {args.out}")
    return 0
