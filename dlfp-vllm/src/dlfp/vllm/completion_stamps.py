"""When each engine step's model output became available: stamped by the executor.

Why: under async scheduling (vLLM's GPU default) the engine core schedules step N+1 before
step N has finished and collects N's output only when its batch queue is full. The interval
between scheduler calls (the paper's feedback signal) and even the moment
``update_from_output`` runs are then host-side proxies of the device's step time. To feed the
``completion`` signal the device's cadence instead, and to measure the proxy error directly,
each step needs the time its output really became available, next to the scheduler's own
timestamps.

:class:`CompletionStamps` is a mixin for vLLM executors (:mod:`dlfp.vllm.executors` puts it
over ``UniProcExecutor`` and ``MultiprocExecutor``). It pairs each ``sample_tokens`` call with
the oldest step ``execute_model`` queued and not yet sampled (the engine core samples every
step that scheduled tokens exactly once, in order, deferred ones included) and stamps ``time.monotonic()`` on that
step's ``SchedulerOutput``, the object the engine core later hands to
``update_from_output``, where the DLFP scheduler copies it into ``StepRecord.exec_done_t``
before its tracker takes the step's completion time (the stamp where it is plausible, else the
collect time: :func:`dlfp.control.signals.completion_time_usable`):

* an output that is ready when ``sample_tokens`` returns (synchronous scheduling, the worker
  in this process: the CPU engine) is stamped at once;
* a pending one (async scheduling: vLLM's lazy ``AsyncOutputFuture``, whose ``result()``
  waits on the CUDA event of the step's device-to-host copy of its sampled tokens; or a
  multiprocess executor's reply) is waited for on one relay thread from the moment it is
  issued, and stamped when that wait returns: within a thread wake-up of the output existing,
  not when the engine core gets round to asking for it.

The stamp is the host's view of completion: the GPU's finish plus the sampled tokens' copy to
the host (and, with worker processes, the reply message; expected tens of microseconds, not
measured here: no GPU), not a CUDA-event timeline of the kernels. All processes of one engine
share ``CLOCK_MONOTONIC``, so the stamp is on the scheduler's time base. No vLLM import here:
the scheduler reads the stamps, and the logic is tested without vLLM.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

EXEC_DONE_ATTR = "dlfp_exec_done_t"
"""Attribute of a ``SchedulerOutput`` holding the ``time.monotonic()`` its output became available."""


def stamp(scheduler_output: Any | None, t: float | None = None) -> None:
    """Record that ``scheduler_output``'s model output became available at ``t`` (default: now)."""
    if scheduler_output is not None:
        setattr(scheduler_output, EXEC_DONE_ATTR, time.monotonic() if t is None else t)


def exec_done_t(scheduler_output: Any) -> float | None:
    """The stamp of a step, or None (executor without stamps, e.g. the modeled one, or an empty step)."""
    return getattr(scheduler_output, EXEC_DONE_ATTR, None)


class Relay:
    """One daemon thread that waits for futures in the order they are handed over.

    ``submit(inner, step)`` returns a new future that resolves like ``inner`` once the relay
    thread has waited for it, after stamping ``step``; so whoever waits on the returned future
    sees the stamp. One thread in issue order is also what makes it safe over vLLM's
    multiprocess executor, whose futures must drain one response queue in order. Daemon: a
    wait on a dead worker cannot keep the engine-core process from exiting.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Any, Future[Any]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, inner: Future[Any], step: Any | None = None) -> Future[Any]:
        outer: Future[Any] = Future()
        self._queue.put((inner, step, outer))
        return outer

    def close(self) -> None:
        """Stop the thread after the futures already handed over."""
        self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            inner, step, outer = item
            try:
                value = inner.result()
            except BaseException as exc:  # the waiter re-raises it, as vLLM's own future would
                outer.set_exception(exc)
                continue
            stamp(step)
            outer.set_result(value)


class CompletionStamps:
    """Executor mixin: stamps each sampled step's output availability (module docstring).

    Place it before the vLLM executor class in the bases. Generative models only: a pooling
    model's ``execute_model`` returns its output itself and is never sampled.
    """

    _unsampled: deque[Any]
    _relay: Relay

    def _init_executor(self) -> None:
        # Before the base class starts workers: its start-up RPCs may already go through us.
        self._unsampled = deque()
        self._relay = Relay("dlfp-exec-done")
        super()._init_executor()  # type: ignore[misc]

    def execute_model(self, scheduler_output: Any, non_block: bool = False) -> Any:
        if scheduler_output.total_num_scheduled_tokens > 0:  # an empty step is not sampled
            self._unsampled.append(scheduler_output)
        return super().execute_model(scheduler_output, non_block)  # type: ignore[misc]

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        step = self._unsampled.popleft() if self._unsampled else None
        future = super().sample_tokens(grammar_output, non_block=True)  # type: ignore[misc]
        if future.done():  # ran inline (worker in this process, synchronous scheduling)
            if future.exception() is None:
                stamp(step)
        else:
            future = self._relay.submit(future, step)
        return future if non_block else future.result()

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            self._relay.close()
