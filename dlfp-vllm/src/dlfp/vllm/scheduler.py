"""DLFP inside vLLM 0.32's scheduler: thin glue around :mod:`dlfp.control.law`.

vLLM accepts one ``scheduler_cls`` and uses it instead of its own choice between
``Scheduler`` (synchronous engines) and ``AsyncScheduler`` (async scheduling, the GPU
default). A plain ``Scheduler`` subclass under async scheduling gives each request a
token only every other step, so both names exported here pick the variant matching the
engine's ``scheduler_config.async_scheduling`` when constructed: naming either one is
always right.

Per step, ``schedule()`` decides from the running/waiting queues whether prefill would
share the step with running decodes; if so it temporarily lowers the scheduler's token
budget to ``decodes + cap`` and the per-request prefill threshold to ``cap``, calls
vLLM's own ``schedule()``, and restores both. Everything else is vLLM's.

The prefill cadence (``prefill_every`` N > 1, a baseline; independent of ``enabled``): on a step
whose index is not a multiple of N, where prefill waits and a decode will run, prefill is deferred
by vLLM's own mechanism, ``schedule(throttle_prefills=True)`` (its DP prefill balancing): the
running loop skips mid-prefill requests and the waiting loop admits no prompt that needs compute,
so decodes get the whole budget and the next cadence step gets stock's chunk (or the cap). A
budget of exactly the decode tokens would not do it: mid-prefill requests come first in
``running`` and would eat the decodes' share. vLLM stops throttling while its last release step
was capacity-bound (``prefill_capacity_bound``: waiting prompts it could not admit), which under
load would turn the cadence back into stock; a deferred step clears that flag for its own call
and puts it back, so vLLM's DP bookkeeping is what it would have been. Deferred steps are not
mixed, so with control on the chunk adapts only across consecutive mixed steps (none at N > 1):
the cadence arms run with control off or a fixed cap.

vLLM's own prefill schedule interval (``prefill_interval`` N > 1, the baseline users try first: the
mechanism of vLLM PR 44558, made for data-parallel engines, on one engine's clock as PR 54627 proposes):
prefill is throttled through the same ``throttle_prefills`` call until N-1 steps without prefill have
passed since the last step that carried some, and vLLM's saturation guard stays in force: a release step
that could not admit every waiting prompt switches the throttle off until one can. This is the cadence
as vLLM ships it; ``prefill_every`` is the cadence without the guard.

The controller (``controller``, by name from :mod:`dlfp.control.registry`) sees one
:class:`~dlfp.control.protocol.StepContext` per call and returns a decision; the glue names none of
them. What a controller reads beyond the O(1) facts it declares (``needs``): the batch's sums (the
decodes' context tokens and the context of the request the chunk goes to: one pass over ``running``)
and the prompts still to prefill with their TTFT deadlines (one pass over the waiting queue), each
gathered only for a controller that reads it. Each completed step goes back to the controller with its
completion time, the one the ``completion`` signal takes, so a fit runs on the device's clock where the
executor stamps. A cap of 0 defers the step's prefill, through the same mechanism as the cadence.
Whatever a controller decides, the saturation guard (:mod:`dlfp.control.guard`, ``saturation_guard``)
runs a capped or deferred step unrestricted once the prompt at the head of the prefill queue has waited
``ttft_slo_ms`` since ``add_request`` saw it, and the step's record says ``saturated``.

Per completed step, ``update_from_output`` copies the executor's completion stamp (when the
step's output became available, :mod:`dlfp.vllm.completion_stamps`) into the step record before
the tracker sees it, so the ``completion`` signal runs on the device's clock where the executor
stamps, and on the collect time where it does not (:mod:`dlfp.control.signals`).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from dlfp.control import registry
from dlfp.control.guard import saturated
from dlfp.control.params import DLFPConfigError, DLFPParams, parse_params
from dlfp.control.protocol import BATCH, QUEUE, CompletedStep, Prompt, StepContext
from dlfp.control.signals import StepRecord, StepTracker
from dlfp.control.steplog import StepLog
from dlfp.vllm.completion_stamps import exec_done_t
from dlfp.vllm.version import PLUGIN_VERSION, check_supported

logger = logging.getLogger("dlfp")

STEP_LOG_ENV = "DLFP_STEP_LOG"
"""Environment variable naming a step-log file; ``step_log`` in the config wins over it."""


def params_from_vllm_config(vllm_config: Any) -> DLFPParams:
    """Read and validate ``additional_config["dlfp"]``; raises ``DLFPConfigError``."""
    extra = vllm_config.additional_config or {}
    raw = dict(extra.get("dlfp", {})) if isinstance(extra, dict) else {}
    params = parse_params(raw)
    if params.step_log is None and os.environ.get(STEP_LOG_ENV):
        params = parse_params({**raw, "step_log": os.environ[STEP_LOG_ENV]})
    return params


def _skipped_decodes(running: list[Any]) -> int:
    """Decoding requests vLLM 0.32 will not schedule this step: under async scheduling a
    request whose in-flight tokens already reach ``max_tokens`` is skipped. Their budget
    share must not fall to prefill, or the step's prefill would exceed the cap."""
    return sum(
        1 for r in running
        if r.num_output_placeholders > 0
        and r.num_computed_tokens + 2 - r.num_output_placeholders >= r.num_prompt_tokens + r.max_tokens
    )


def _prefill_work(out: SchedulerOutput, prefilling: list[str]) -> tuple[int, int]:
    """Prefill tokens and requests in a step: new, resumed and mid-prefill requests."""
    counts = out.num_scheduled_tokens
    ids = {n.req_id for n in out.scheduled_new_reqs}
    ids.update(out.scheduled_cached_reqs.resumed_req_ids)
    ids.update(prefilling)
    # Over the prefill ids only (intersecting with ``counts`` would walk every scheduled request).
    tokens = [counts[i] for i in ids if i in counts]
    return sum(tokens), len(tokens)



def executor_name(backend: Any) -> str:
    """The executor an engine was configured with, as the step log records it: a class by its
    qualified name, a dotted path or vLLM's short name ("uni", "mp", "ray") as given, or "default"."""
    if backend is None:
        return "default"
    if isinstance(backend, type):
        return f"{backend.__module__}.{backend.__qualname__}"
    return str(backend)

if TYPE_CHECKING:
    _SchedulerBase = Scheduler
    """What the mixin is mixed into, so a type checker reads ``super()`` and vLLM's attributes."""
else:
    _SchedulerBase = object


class _DLFPMixin(_SchedulerBase):
    """The DLFP behaviour shared by the sync and async variants."""

    clock: Callable[[], float] = staticmethod(time.monotonic)
    """Where the scheduler reads the time (its scheduler-call stamps and collect times, hence both
    signals and the SLO controller's fit): this process's monotonic clock in an engine, the driver's
    clock when a virtual-time driver (:mod:`dlfp.sim.virtual`) sets it on the instance, so that a
    simulated run reads no real clock and comes out the same on any machine."""

    def __new__(cls, vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        wanted = DLFPAsyncScheduler if vllm_config.scheduler_config.async_scheduling else DLFPScheduler
        if cls in (DLFPScheduler, DLFPAsyncScheduler) and cls is not wanted:
            logger.info("dlfp: %s requested, engine async_scheduling=%s: using %s",
                        cls.__name__, vllm_config.scheduler_config.async_scheduling,
                        wanted.__name__)
            if not issubclass(wanted, cls):
                # type.__call__ will not run __init__ on an instance of another class.
                obj = object.__new__(wanted)
                obj.__init__(vllm_config, *args, **kwargs)  # type: ignore[misc]  # wanted's own __init__
                return obj
            cls = wanted
        return object.__new__(cls)

    def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        check_supported()
        params = params_from_vllm_config(vllm_config)  # fail before vLLM allocates anything
        super().__init__(vllm_config, *args, **kwargs)
        if self.connector is not None:
            raise DLFPConfigError("dlfp: KV connectors (disaggregated prefill, KV offloading) are not supported: "
                                  "the decode count would include remote KV fetches")
        # schedule() reads the per-request threshold from scheduler_config; a private
        # copy keeps the shared VllmConfig unmutated while we lower it for a step.
        self.scheduler_config = copy.copy(self.scheduler_config)
        self._base_threshold: int = self.scheduler_config.long_prefill_token_threshold
        self._base_budget: int = self.max_num_scheduled_tokens
        self._base_adaptive: bool = self.adaptive_long_prefill_threshold
        self.dlfp_params = params
        self._every = int(params.prefill_every)
        self._interval = int(params.prefill_interval)
        self._inflight: dict[int, StepRecord] = {}
        self._start_control()
        self._segment = 0
        self._header = {
            "dlfp_version": PLUGIN_VERSION,
            "scheduler": type(self).__name__,
            "async_scheduling": bool(vllm_config.scheduler_config.async_scheduling),
            "executor": executor_name(vllm_config.parallel_config.distributed_executor_backend),
            "params": {k: getattr(params, k) for k in params.__slots__},
        }
        self._log = StepLog(params.step_log, header=self._stamped_header()) if params.step_log else None
        logger.info("dlfp: %s active with %s", type(self).__name__, params)

    def _start_control(self) -> None:
        """A fresh controller, signal tracker and step count: what an engine start begins with."""
        self.dlfp_controller = registry.build(self.dlfp_params)
        needs = self.dlfp_controller.needs
        self._needs_batch, self._needs_queue = BATCH in needs, QUEUE in needs
        self._first_seen: dict[str, float] = {}
        self._tracker = StepTracker(self.dlfp_params.signal)
        self._step = 0
        self._quiet = self.dlfp_params.prefill_interval
        """Steps since the last one that carried prefill (``prefill_interval``; a fresh engine admits at once)."""

    def _stamped_header(self) -> dict[str, Any]:
        return {**self._header, "segment": self._segment, "wall_time": time.time(), "monotonic": time.monotonic(),
                "pid": os.getpid()}

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        """vLLM's prefix-cache reset; on an idle engine (nothing running, waiting or in flight) DLFP
        starts over too: a fresh controller, tracker and step count, and a new step-log segment
        (:meth:`dlfp.control.steplog.StepLog.segment`). The harness resets an engine it reuses for
        another workload this way, so the next workload meets the state a fresh engine would."""
        done = super().reset_prefix_cache(reset_running_requests, reset_connector)
        if not (self.running or self.waiting):
            pending = list(self._inflight.values())
            self._inflight.clear()
            self._start_control()
            self._segment += 1
            if self._log is not None:
                self._log.segment(self._stamped_header(), pending)
        return done

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        now = self.clock()
        # vLLM keeps the running requests that are mid-prefill in ``_inflight_prefills``
        # (0.32; it also holds KV-connector fetches, which DLFP does not support), so the
        # decision costs O(1) instead of a pass over every running request.
        prefilling = [r.request_id for r in self._inflight_prefills]
        n_decodes = len(self.running) - len(prefilling)
        prefill_waiting = bool(prefilling) or len(self.waiting) > 0
        mixed = prefill_waiting and n_decodes > 0
        # Decodes vLLM will skip this step: counted once, and only where prefill meets decodes under a
        # cadence or with control on (the deferral, the cap and the SLO controller's sizing need it;
        # a stock arm, control off at every step, pays no pass over ``running``).
        skipped = _skipped_decodes(self.running) if mixed and (self._every > 1 or self.dlfp_params.enabled) else 0
        # Off-cadence: defer the prefill if a decode will really run (async vLLM skips decodes whose
        # in-flight tokens reach max_tokens; deferring for those alone would leave the step empty).
        deferred = mixed and self._step % self._every != 0 and n_decodes > skipped
        if deferred:
            prefill_waiting = mixed = False  # this step plans decodes only: no cap, no guarded cycle
        obs = self._tracker.observe(now, mixed)
        target_s = self._target_s()
        decode_context = prefill_context = None
        if self._needs_batch:
            decode_context, prefill_context = self._contexts()
        ctx = StepContext(decodes_running=n_decodes >= self.dlfp_params.pressure_decodes,
                          prefill_waiting=prefill_waiting, obs=obs, target_s=target_s, decode_reqs=n_decodes - skipped,
                          now=now, decode_context=decode_context or 0, prefill_context=prefill_context or 0,
                          prompts=self._prompts(now) if self._needs_queue and mixed else (),
                          budget_tokens=self._base_budget)
        decision = self.dlfp_controller.decide(ctx)
        cap = decision.cap
        # The saturation guard (dlfp.control.guard), for every controller: a capped or deferred step whose
        # queue head has waited a whole TTFT SLO runs unrestricted. The cadence's own deferral is not a
        # controller's and keeps its schedule (the cadence baseline is the one without a guard).
        released = (cap is not None and not deferred and self.dlfp_params.saturation_guard
                    and saturated(self._oldest_wait(now), self.dlfp_params.ttft_slo_s))
        if released:
            cap = None
        if cap == 0 and not deferred:
            # The controller defers this step's prefill: where a decode really runs in its place; where
            # none would (async vLLM skips them all), the step runs unrestricted rather than empty.
            if n_decodes > skipped:
                deferred = True
            else:
                cap = None
        throttle = throttle_prefills or (self._interval > 1 and self._quiet < self._interval - 1)
        if deferred:
            out = self._schedule_deferred()
        elif cap is None:
            out = super().schedule(throttle)
        else:
            decode_tokens = n_decodes - skipped
            self.max_num_scheduled_tokens = min(self._base_budget, decode_tokens + cap)
            self.scheduler_config.long_prefill_token_threshold = (
                min(self._base_threshold, cap) if self._base_threshold > 0 else cap
            )
            self.adaptive_long_prefill_threshold = False
            try:
                out = super().schedule(throttle)
            finally:
                self.max_num_scheduled_tokens = self._base_budget
                self.scheduler_config.long_prefill_token_threshold = self._base_threshold
                self.adaptive_long_prefill_threshold = self._base_adaptive
        prefill_tokens, prefill_reqs = _prefill_work(out, prefilling)
        if self._interval > 1:
            self._quiet = 0 if prefill_tokens > 0 else self._quiet + 1
            if mixed and not deferred and prefill_tokens == 0 and self._quiet <= self._interval - 1:
                deferred = True  # the interval held the waiting prefill back (the guard did not release it)
        record = StepRecord(
            step=self._step, schedule_t=now, complete_t=None, prefill_tokens=prefill_tokens,
            decode_reqs=len(out.num_scheduled_tokens) - prefill_reqs,
            total_tokens=out.total_num_scheduled_tokens, cap=cap,
            signal_s=None if obs is None else obs.interval_s, guarded=decision.updated,
            target_s=target_s, chunk=self.dlfp_controller.chunk, deferred=deferred, saturated=released,
            decode_context=decode_context, prefill_context=prefill_context,
            controller=None if (own := decision.log_fields()) is None else dict(own),
        )
        self._step += 1
        self._tracker.scheduled(record)
        self._inflight[id(out)] = record
        return out

    def _contexts(self) -> tuple[int, int]:
        """Context tokens of the running decodes in all, and of the request a prefill chunk goes to
        next: a mid-prefill request (vLLM keeps them in a set; there is rarely more than one), else the
        head of the waiting queue, whose cached prefix vLLM has not looked up yet (0 tokens)."""
        prefilling = self._inflight_prefills
        total = sum(r.num_computed_tokens for r in self.running)
        inflight = sum(r.num_computed_tokens for r in prefilling)
        head = next(iter(prefilling), None) or next(iter(self.waiting), None)
        return total - inflight, 0 if head is None else head.num_computed_tokens

    def add_request(self, request: Any) -> None:
        """vLLM's, after noting when this scheduler first saw the request, on its own clock (a request's
        ``arrival_time`` is the frontend's wall clock, not this one): its TTFT deadline and its wait."""
        seen = self._first_seen
        seen.setdefault(request.request_id, self.clock())
        if len(seen) > 2 * (len(self.waiting) + len(self._inflight_prefills)) + 256:  # forget prefilled ones
            live = {r.request_id for r in (*self._inflight_prefills, *self.waiting)}
            self._first_seen = {k: v for k, v in seen.items() if k in live}
            self._first_seen[request.request_id] = seen[request.request_id]
        super().add_request(request)

    def _oldest_wait(self, now: float) -> float | None:
        """How long the prompt at the head of the prefill queue (a mid-prefill request, else the head of the
        waiting queue: vLLM's order) has waited since this scheduler first saw it; None where none waits."""
        head = next(iter(self._inflight_prefills), None) or next(iter(self.waiting), None)
        return None if head is None else now - self._first_seen.setdefault(head.request_id, now)

    def _prompts(self, now: float) -> tuple[Prompt, ...]:
        """The prompts still to prefill (mid-prefill first, then waiting, in vLLM's order), each with its
        remaining tokens and its TTFT deadline: when this scheduler first saw it plus ``ttft_slo_ms``."""
        seen, ttft_s = self._first_seen, self.dlfp_params.ttft_slo_s
        return tuple(Prompt(remaining=max(0, r.num_prompt_tokens - r.num_computed_tokens),
                            deadline_s=seen.setdefault(r.request_id, now) + ttft_s)
                     for r in (*self._inflight_prefills, *self.waiting))

    def _schedule_deferred(self) -> SchedulerOutput:
        """A decodes-only step through vLLM's prefill deferral (module docstring): its capacity-bound
        escape is cleared for this call and restored, as a deferred call never updates it."""
        bound = self.prefill_capacity_bound
        self.prefill_capacity_bound = False
        try:
            return super().schedule(True)
        finally:
            self.prefill_capacity_bound = bound

    def _target_s(self) -> float:
        """T*: the parameters' (a fraction of the ITL SLO), or with ``target: decode`` a multiple
        of the decode-only step measured so far (the SLO-derived T* until one is measured)."""
        p, measured = self.dlfp_params, self._tracker.decode_step_s
        if p.target == "decode" and measured is not None:
            return p.target_decode_steps * measured
        return p.target_interval_s

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any) -> Any:
        record = self._inflight.pop(id(scheduler_output), None)
        if record is not None:
            now = self.clock()  # the collect time: the fallback where the executor left no stamp
            # The stamp first: where the executor stamps (dlfp.vllm.executors), the completion signal
            # takes the device's completion rather than this collect time, which under async
            # scheduling lags it by however long the engine core took to ask for the output.
            record.exec_done_t = exec_done_t(scheduler_output)
            self._tracker.completed(record, now)
            if self._needs_batch and record.decode_context is not None and record.total_tokens > 0:
                done_t = self._tracker.last_done_t  # set by completed() just above
                self.dlfp_controller.completed(CompletedStep(
                    decode_reqs=record.decode_reqs, decode_context=record.decode_context,
                    prefill_tokens=record.prefill_tokens, prefill_context=record.prefill_context or 0,
                    schedule_t=record.schedule_t, done_t=now if done_t is None else done_t, cap=record.cap,
                    fields=record.controller))
            if self._log is not None:
                self._log.add(record)
        return super().update_from_output(scheduler_output, model_runner_output)

    def shutdown(self) -> None:
        if self._log is not None:
            self._log.close(list(self._inflight.values()))
        super().shutdown()


class DLFPScheduler(_DLFPMixin, Scheduler):
    """DLFP over vLLM's synchronous ``Scheduler`` (switches to async when the engine is)."""


class DLFPAsyncScheduler(DLFPScheduler, AsyncScheduler):
    """DLFP over vLLM's ``AsyncScheduler`` (switches to sync when the engine is)."""
