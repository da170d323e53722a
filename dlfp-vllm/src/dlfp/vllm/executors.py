"""vLLM's own executors with per-step completion stamps (:mod:`dlfp.vllm.completion_stamps`).

:func:`dlfp.harness.engine.engine_kwargs` names these instead of ``"uni"``/``"mp"`` for every real
engine, so the ``completion`` signal runs on the stamps and ``steps.parquet`` carries
``exec_done_t`` (and ``complete_source``) beside the scheduler's timestamps. They are
resolved by dotted path in the engine-core process (where the DLFP scheduler is resolved too);
worker processes never import them: they receive the engine config, whose executor and
scheduler entries are plain strings.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.executor.multiproc_executor import MultiprocExecutor
from vllm.v1.executor.uniproc_executor import UniProcExecutor

from dlfp.vllm.completion_stamps import CompletionStamps


class TimedUniProcExecutor(CompletionStamps, UniProcExecutor):
    """vLLM's ``UniProcExecutor`` (the worker inside the engine-core process), stamped."""


class TimedMultiprocExecutor(CompletionStamps, MultiprocExecutor):
    """vLLM's ``MultiprocExecutor`` (workers in their own processes: TP/PP), stamped.

    Every RPC's reply is read by the relay thread, in issue order: vLLM's futures drain the
    workers' response queue in order and the queue has a single reader, so reading step
    outputs on a second thread while the engine thread read others would mismatch replies.
    """

    def collective_rpc(  # type: ignore[override]  # vLLM's further keyword arguments pass through in options
            self, method: Any, timeout: float | None = None, args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None, non_block: bool = False, **options: Any) -> Any:
        inner = super().collective_rpc(method, timeout, args, kwargs, non_block=True, **options)
        outer = self._relay.submit(inner)
        return outer if non_block else outer.result()
