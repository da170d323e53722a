"""Pre-flight: measure the engine's decode step and prefill cost before the trials (seconds).

The design (:mod:`dlfp.trials.design`) needs two facts about the engine a config names, on the machine
it runs on: how long a decode-only step takes with a few requests decoding, and how much a
prefill chunk of ``n`` tokens adds to such a step. The pre-flight starts the stock arm's engine
(a fresh one, as every arm gets), keeps ``decoders`` requests decoding, and sends one prefill at
a time of each probe size (three times), waiting until the decodes have run on a little before the
next: closed loop, so it adapts to the machine's speed instead of assuming it. Step times are
the engine's *completion cadence* (time between consecutive steps' outputs), the interval the
decoding requests experience; it is also what a saturated async engine (GPU default) delivers,
where the span between scheduling and completion of one step is not.

The decoders are cancelled when the probes are done; the step records are kept in the run
folder (``preflight/steps.parquet``) with the fit, so the design can be checked afterwards.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlfp.control.steplog import FLUSH_AFTER_S, read_step_log
from dlfp.harness.arm import run_coroutine, with_engine
from dlfp.harness.driver import EngineTarget
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import MIN_TOKEN_ID, Request
from dlfp.trials.costcheck import cadence as step_cadence
from dlfp.trials.costcheck import plain_decode
from dlfp.trials.prediction import Measured, Workload, probe_sizes

REPEATS = 3
SETTLE_TOKENS = 8
"""Decode tokens every decoder receives between two probes, so each probe lands in steady decoding
(and the decode step is sampled often: a median over about a hundred steps)."""
WARM_TOKENS = 16
DECODER_PROMPT = 32


@dataclass(frozen=True)
class PreflightResult:
    measured: Measured
    steps: pd.DataFrame
    """The pre-flight engine's step records (times on the engine's monotonic clock)."""


def _prompt(seed: int, n: int, vocab: int) -> tuple[int, ...]:
    span = vocab - 1 - MIN_TOKEN_ID
    return tuple(MIN_TOKEN_ID + (seed * 7919 + j * 104729) % span for j in range(n))


async def _probe(target: EngineTarget, sizes: tuple[int, ...], decoders: int, vocab: int,
                 max_model_len: int) -> None:
    """Keep ``decoders`` requests decoding; prefill each probe size ``REPEATS`` times, one at a time."""
    counts = [0] * decoders
    progress = asyncio.Event()

    async def decode(i: int) -> None:
        req = Request(f"pf-decode-{i}", i, "preflight", 0.0, _prompt(i, DECODER_PROMPT, vocab),
                      max_model_len - DECODER_PROMPT - 1)
        try:
            async for ids in target.stream(req):
                counts[i] += len(ids)
                progress.set()
        finally:  # an ended or failed decoder wakes the waiter too, which then refuses to go on
            progress.set()

    async def until(minimum: int) -> None:
        while min(counts) < minimum:
            if any(t.done() for t in tasks):  # every decoder must run on: a stopped one never catches up
                raise RuntimeError("pre-flight decoders ended before the probes were done")
            progress.clear()
            await progress.wait()

    tasks = [asyncio.create_task(decode(i)) for i in range(decoders)]
    try:
        await until(WARM_TOKENS)
        for k, size in enumerate([s for s in sizes for _ in range(REPEATS)]):
            req = Request(f"pf-prefill-{k}", decoders + k, "preflight", 0.0, _prompt(1000 + k, size, vocab), 1)
            async for _ in target.stream(req):
                pass
            await until(min(counts) + SETTLE_TOKENS)
        await asyncio.sleep(FLUSH_AFTER_S * 1.2)  # decode on until the step log has flushed the last probe
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def fit(steps: pd.DataFrame, sizes: tuple[int, ...], decoders: int, source: str) -> Measured:
    """Decode step and prefill cost from the pre-flight's step records (module docstring).

    The decode step is the median cadence of decode-only steps that follow a decode-only step
    with all decoders running; each probe size's mixed step is the median cadence of steps
    carrying that many prefill tokens; ``a + b n`` is fitted to their excess over the decode step.
    """
    s, cadence = step_cadence(steps)
    plain = plain_decode(s, cadence, decoders)
    if plain.sum() < 5:
        raise RuntimeError(f"pre-flight: only {int(plain.sum())} decode-only steps were recorded; cannot measure "
                           "the decode step (is the engine running the DLFP scheduler with a step log?)")
    d = float(cadence[plain].median())
    xs, ys = [], []
    for n in sizes:
        hit = (s.prefill_tokens == n) & (s.decode_reqs >= decoders - 1) & cadence.gt(0)
        if hit.any():
            xs.append(float(n))
            ys.append(float(cadence[hit].median()) - d)
    if len(xs) < 2:
        raise RuntimeError(f"pre-flight: mixed steps of only {len(xs)} probe size(s) {sizes} were recorded; "
                           "cannot fit the prefill cost (was the token budget smaller than the probes?)")
    b, a = np.polyfit(xs, ys, 1)
    if a < 0 or b <= 0:  # noise on a nearly proportional cost: fit through the origin instead
        a = 0.0
        b = float(np.dot(xs, ys) / np.dot(xs, xs))
    if b <= 0:
        raise RuntimeError(f"pre-flight: prefill made steps no longer (excess {ys} s for {xs} tokens): "
                           "the measurement is noise; rerun on a quieter machine")
    return Measured(decode_s=d, prefill_fixed_s=float(a), prefill_per_token_s=float(b), decoders=decoders,
                    source=source)


class VirtualProbe:
    """:func:`_probe`'s closed loop as a client of a virtual run (:mod:`dlfp.sim.virtual`): the same
    decoders, probes, warm-up and settling, each request sent when the tokens it waits for arrive."""

    def __init__(self, sizes: tuple[int, ...], decoders: int, vocab: int, max_model_len: int) -> None:
        self.plan = [s for s in sizes for _ in range(REPEATS)]
        self.decoders, self.vocab, self.max_model_len = decoders, vocab, max_model_len
        self.counts = [0] * decoders
        self.sent = 0  # probes sent
        self.settle_to: int | None = WARM_TOKENS  # the decoders' token count the next probe waits for
        self.done = False

    def start(self, run: Any) -> None:
        from dlfp.sim.virtual import Submission

        for i in range(self.decoders):
            run.submit(Submission(f"pf-decode-{i}", _prompt(i, DECODER_PROMPT, self.vocab),
                                  self.max_model_len - DECODER_PROMPT - 1, 0.0))

    def received(self, run: Any, request: Any, new_tokens: int) -> None:
        from dlfp.sim.virtual import Submission

        rid, t = request.submission.request_id, request.token_t[-1] if request.token_t else run.clock.now
        if rid.startswith("pf-decode-"):
            if request.finish_s is not None:
                raise RuntimeError("pre-flight decoders ended before the probes were done")
            self.counts[int(rid.rsplit("-", 1)[1])] = len(request.token_ids)
        elif request.finish_s is not None:  # a probe is through: settle before the next
            self.settle_to = min(self.counts) + SETTLE_TOKENS
        if self.settle_to is None or min(self.counts) < self.settle_to:
            return
        self.settle_to = None
        if self.sent == len(self.plan):
            self.done = True
            return
        k, size = self.sent, self.plan[self.sent]
        run.submit(Submission(f"pf-prefill-{k}", _prompt(1000 + k, size, self.vocab), 1, t))
        self.sent += 1


def run_preflight(spec: EngineSpec, facts: Workload, decoders: int, vocab: int, source: str) -> PreflightResult:
    """Start ``spec``'s engine (stock scheduling), probe it, fit :class:`Measured`. On the virtual clock
    the same probes run as :class:`VirtualProbe` on an in-process engine core."""
    sizes = probe_sizes(facts, decoders)
    with tempfile.TemporaryDirectory(prefix="dlfp-preflight-") as tmp:
        log = Path(tmp) / "steps.jsonl"
        engine = EngineSpec(**{**spec.__dict__, "dlfp": {**spec.dlfp, "enabled": False, "step_log": str(log)}})
        if spec.virtual:
            from dlfp.harness.engine import engine_kwargs
            from dlfp.sim.virtual import simulate

            simulate(engine_kwargs(engine), VirtualProbe(sizes, decoders, vocab, spec.max_model_len), log)
        else:
            run_coroutine(with_engine(engine, lambda target: _probe(target, sizes, decoders, vocab,
                                                                     spec.max_model_len)))
        runs = list(read_step_log(log))
    if not runs:
        raise RuntimeError("pre-flight: the engine wrote no step records")
    steps = pd.DataFrame(runs[-1][1])
    return PreflightResult(fit(steps, sizes, decoders, source), steps)
