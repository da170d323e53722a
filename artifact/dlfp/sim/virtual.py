"""Virtual time: vLLM's own engine core and scheduler driven by a discrete-event clock.

The real-time mode (:mod:`dlfp.sim.executor`) sleeps each modeled step inside a real engine, so a run
costs its modeled duration in wall time and its host side is whatever the simulating machine's Python
takes. Here nothing sleeps and nothing reads a real clock: one :class:`VirtualClock` is the time of
every event, and a run is a pure function of its config, cost profile and workload, byte-identical on
any machine, beside any load, in any worker process.

What stays real is vLLM 0.32's ``EngineCore`` itself, built in this process with
:class:`VirtualExecutor`: its scheduler (ours, :class:`dlfp.vllm.DLFPScheduler`, which every arm runs,
stock with control off), KV cache manager, request objects, ``update_from_output``, and the very step
functions its busy loop calls, ``step`` (synchronous: schedule, execute, wait, update) and
``step_with_batch_queue`` (async scheduling: a batch queue of two, so step N+1 is scheduled before
step N's output is waited for). :func:`VirtualRun.run` plays the busy loop around them
(``run_busy_loop``: take the input queue, step, put the outputs out, and the 1 ms yield of an engine
that executed nothing while requests remain) and prices every host piece from the profile:

* ``schedule()`` and ``update_from_output``: the engine-core cost profile (``dlfp_sim.engine``,
  :class:`EngineHost`),
  charged on the virtual clock when each call returns; the scheduler reads the clock at the start of
  each (``DLFPScheduler.clock``), as it reads ``time.monotonic`` in an engine;
* the model runner's host time per step, then the GPU time on one in-order stream
  (:func:`dlfp.sim.costmodel.step_time`, or a fitted profile), as the real-time executor spends them;
  the step's completion stamp is its stream finish;
* a request enters the engine ``input_us`` after it arrives; a step's tokens reach the client
  ``output_s`` after its ``update_from_output`` returned.

Tokens are fabricated exactly as in real time (:func:`dlfp.sim.executor.sampled_token`), so outputs agree
across modes and arms. Only what vLLM's engine core does in its busy loop is modeled: no KV connectors,
speculative decoding, structured output, LoRA, pipeline or data parallelism (refused where they are
configured: :func:`unsupported`).
"""

from __future__ import annotations

import gc
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vllm.config import VllmConfig
from vllm.envs import disable_envs_cache
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.engine import core as engine_core_module
from vllm.v1.engine.core import EngineCore
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from dlfp.sim.costmodel import EngineHost, StepTime, load_engine_host
from dlfp.sim.executor import ModeledExecutor
from dlfp.vllm.completion_stamps import stamp

VIRTUAL_EXECUTOR = "dlfp.sim.virtual.VirtualExecutor"
IDLE_YIELD_S = 0.001
"""vLLM's engine core sleeps this long after a step that executed no model while requests remain
(``EngineCore._process_engine_step``, 0.32)."""
MAX_IDLE_STEPS = 100_000
"""Consecutive steps that executed nothing before a run is declared stuck (a request that can never be
scheduled, say): an engine would spin on them forever; a simulation says so."""


class VirtualClock:
    """The one time of a virtual run, in seconds from its start; calling it reads it."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def advance_to(self, t: float) -> None:
        if t > self.now:
            self.now = t


class _StepOutput:
    """What ``sample_tokens`` hands the engine core for one step: waiting on it moves the clock to the
    step's stream finish (a blocking ``future.result()`` in an engine), which is also its stamp."""

    __slots__ = ("_clock", "_end", "_output", "_scheduler_output")

    def __init__(self, clock: VirtualClock, end: float, output: ModelRunnerOutput,
                 scheduler_output: SchedulerOutput) -> None:
        self._clock, self._end, self._output, self._scheduler_output = clock, end, output, scheduler_output

    def done(self) -> bool:
        return self._clock.now >= self._end

    def result(self, timeout: float | None = None) -> ModelRunnerOutput:
        self._clock.advance_to(self._end)
        stamp(self._scheduler_output, self._end)
        return self._output


class VirtualExecutor(ModeledExecutor):
    """The modeled executor on a virtual clock: host time advances the clock, the stream is a time."""

    clock: VirtualClock

    def _init_executor(self) -> None:
        super()._init_executor()
        self.clock = VirtualClock()  # the driver hands in the run's clock before the first step

    def _now(self) -> float:
        return self.clock.now

    def _launch(self, entry: float, cost: StepTime, output: ModelRunnerOutput, scheduler_output: SchedulerOutput,
                requests: int) -> _StepOutput:
        self.clock.advance(cost.host_s)
        start = max(self.clock.now, self._stream_free_t)
        self._stream_free_t = start + cost.gpu_s
        return _StepOutput(self.clock, self._stream_free_t, output, scheduler_output)


def unsupported(config: VllmConfig) -> list[str]:
    """The features of ``config`` the virtual driver does not model (empty: it can run it)."""
    found = []
    if config.speculative_config is not None:
        found.append("speculative decoding")
    if config.lora_config is not None:
        found.append("LoRA")
    if config.kv_transfer_config is not None:
        found.append("KV connectors (disaggregated prefill, KV offloading)")
    parallel = config.parallel_config
    if parallel.pipeline_parallel_size > 1 or parallel.data_parallel_size > 1 or parallel.tensor_parallel_size > 1:
        found.append("engine-level parallelism (model TP is dlfp_sim.tp)")
    return found


def build_core(engine_kwargs: Mapping[str, Any]) -> EngineCore:
    """vLLM's ``EngineCore`` for ``engine_kwargs`` (``AsyncEngineArgs`` keywords), in this process, over
    :class:`VirtualExecutor`; refuses what the driver does not model."""
    from vllm import AsyncEngineArgs

    config = AsyncEngineArgs(**{**engine_kwargs, "distributed_executor_backend": VIRTUAL_EXECUTOR}
                             ).create_engine_config()
    missing = unsupported(config)
    if missing:
        raise ValueError(f"virtual time does not model {', '.join(missing)}: run it in real time "
                         "(dlfp_sim.clock: real)")
    # An engine-core process collects and freezes its heap at start-up (vLLM's freeze_gc_heap: three full
    # collections, a third of a short unit's time in a process that holds vLLM and torch) and caches the
    # environment. Here the heap is frozen without the collections, for the run's duration (the same
    # purpose: the garbage collector skips vLLM's and torch's objects), and unfrozen when the run closes so
    # its garbage can go; the environment cache is dropped at once (this process may start other engines).
    with _patched(engine_core_module, "freeze_gc_heap", gc.freeze):
        core = EngineCore(config, executor_class=VirtualExecutor, log_stats=False)
    disable_envs_cache()
    return core


@contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


@dataclass(frozen=True, slots=True)
class Submission:
    """A request a client sends: token-id prompt, exact output length, arrival time (s)."""

    request_id: str
    prompt_token_ids: Sequence[int]
    output_len: int
    arrival_s: float


@dataclass(slots=True)
class Received:
    """What the client saw of one request (times on the run's virtual clock, seconds)."""

    submission: Submission
    token_ids: list[int] = field(default_factory=list)
    token_t: list[float] = field(default_factory=list)
    finish_s: float | None = None


class Client(Protocol):
    """Sends requests and reads their tokens as they arrive; :func:`VirtualRun.run` ends when it is done."""

    def start(self, run: VirtualRun) -> None: ...

    def received(self, run: VirtualRun, request: Received, new_tokens: int) -> None: ...

    @property
    def done(self) -> bool: ...


class OpenLoop:
    """Every request sent at its scheduled arrival, whatever is in flight (the trials' client)."""

    def __init__(self, submissions: Iterable[Submission], on_finish: Callable[[], None] | None = None) -> None:
        self.submissions = sorted(submissions, key=lambda s: s.arrival_s)
        self._left = len(self.submissions)
        self._on_finish = on_finish

    def start(self, run: VirtualRun) -> None:
        for s in self.submissions:
            run.submit(s)

    def received(self, run: VirtualRun, request: Received, new_tokens: int) -> None:
        if request.finish_s is not None:
            self._left -= 1
            if self._on_finish is not None:
                self._on_finish()

    @property
    def done(self) -> bool:
        return self._left == 0


class VirtualRun:
    """One engine core replaying one client's requests on a virtual clock (module docstring)."""

    def __init__(self, core: EngineCore, host: EngineHost, clock: VirtualClock | None = None) -> None:
        self.core = core
        self.host = host
        self.clock = clock or VirtualClock()
        core.model_executor.clock = self.clock
        # vLLM's Scheduler or the plug-in's subclass of it: the driver times its two calls by wrapping them on
        # the instance, and hands DLFP its clock, neither of which SchedulerInterface declares.
        scheduler: Any = core.scheduler
        scheduler.clock = self.clock  # DLFP's stamps: scheduler calls and collect times
        schedule, update = scheduler.schedule, scheduler.update_from_output

        def timed_schedule(*args: Any, **kwargs: Any) -> SchedulerOutput:
            out = schedule(*args, **kwargs)
            self.clock.advance(host.schedule_s(len(out.num_scheduled_tokens)))
            return out

        def timed_update(scheduler_output: SchedulerOutput, model_output: Any) -> Any:
            outputs = update(scheduler_output, model_output)
            self.clock.advance(host.update_s(len(scheduler_output.num_scheduled_tokens)))
            return outputs

        scheduler.schedule, scheduler.update_from_output = timed_schedule, timed_update
        self.received: dict[str, Received] = {}
        self._arrivals: list[tuple[float, int, Submission]] = []
        self._deliveries: list[tuple[float, int, str, list[int], bool]] = []
        self._seq = itertools.count()

    def submit(self, submission: Submission) -> None:
        """Send a request: it reaches the engine ``input_us`` after its arrival."""
        if submission.request_id in self.received:
            raise ValueError(f"request {submission.request_id!r} was already sent")
        self.received[submission.request_id] = Received(submission)
        heapq.heappush(self._arrivals, (submission.arrival_s + self.host.input_s, next(self._seq), submission))

    def run(self, client: Client) -> None:
        """Play the engine core's busy loop until ``client`` is done (module docstring)."""
        core, clock = self.core, self.clock
        client.start(self)
        idle = 0
        while not client.done:
            self._deliver(client, clock.now)
            if client.done:
                break
            self._admit(clock.now)
            if not (core.scheduler.has_requests() or core.batch_queue):  # EngineCoreProc.has_work, no DP
                upcoming = [q[0][0] for q in (self._arrivals, self._deliveries) if q]
                if not upcoming:
                    raise RuntimeError("virtual run: the client waits, but nothing is in flight or yet to arrive")
                clock.advance_to(min(upcoming))
                continue
            outputs, executed = core.step_fn()
            if outputs:
                self._emit(outputs)
            core.post_step(executed)
            if executed:
                idle = 0
            elif core.scheduler.has_requests():
                clock.advance(IDLE_YIELD_S)
                idle += 1
                if idle > MAX_IDLE_STEPS:
                    queues: Any = core.scheduler
                    raise RuntimeError(f"virtual run: {MAX_IDLE_STEPS} steps in a row executed nothing at "
                                       f"t = {clock.now:.3f} s ({len(queues.waiting)} requests waiting, "
                                       f"{len(queues.running)} running): a request can never be scheduled")

    def _admit(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now:
            _, _, s = heapq.heappop(self._arrivals)
            params = SamplingParams(max_tokens=s.output_len, ignore_eos=True, temperature=0.0,
                                    output_kind=RequestOutputKind.DELTA)
            self.core.add_request(Request(request_id=s.request_id, prompt_token_ids=list(s.prompt_token_ids),
                                          sampling_params=params, pooling_params=None, arrival_time=s.arrival_s,
                                          block_hasher=self.core.request_block_hasher))

    def _emit(self, outputs: Mapping[int, Any]) -> None:
        produced = [o for eco in outputs.values() for o in eco.outputs if o.new_token_ids or o.finished]
        if not produced:
            return
        at = self.clock.now + self.host.output_s(len(produced))
        for o in produced:
            heapq.heappush(self._deliveries, (at, next(self._seq), o.request_id, list(o.new_token_ids), o.finished))

    def _deliver(self, client: Client, now: float) -> None:
        while self._deliveries and self._deliveries[0][0] <= now:
            t, _, request_id, token_ids, finished = heapq.heappop(self._deliveries)
            got = self.received[request_id]
            got.token_ids.extend(token_ids)
            got.token_t.extend([t] * len(token_ids))
            if finished:
                got.finish_s = t
            client.received(self, got, len(token_ids))

    def close(self) -> None:
        """Shut the engine core down as ``EngineCore.shutdown`` does for what an in-process core holds (the
        DLFP scheduler writes its pending step records), and unfreeze the heap. Not the process teardown
        (distributed state, device caches) that follows it there: nothing here set those up."""
        core = self.core
        try:
            core.structured_output_manager.clear_backend()
            core.model_executor.shutdown()
            core.scheduler.shutdown()
        finally:
            gc.unfreeze()


def engine_host(core: EngineCore) -> EngineHost:
    """The engine-core cost profile ``core``'s settings name (``dlfp_sim.engine``)."""
    return load_engine_host(core.model_executor.sim.engine)


def simulate(engine_kwargs: Mapping[str, Any], client: Client, step_log: Path | None = None) -> dict[str, Received]:
    """Build a fresh engine core for ``engine_kwargs`` (its DLFP step log at ``step_log``), run ``client``
    against it on a clock starting at 0, shut it down; returns what the client received, by request id."""
    kwargs = dict(engine_kwargs)
    if step_log is not None:
        extra = dict(kwargs.get("additional_config") or {})
        extra["dlfp"] = {**extra.get("dlfp", {}), "step_log": str(step_log)}
        kwargs["additional_config"] = extra
    core = build_core(kwargs)
    run = VirtualRun(core, engine_host(core))
    try:
        run.run(client)
    finally:
        run.close()
    return run.received
