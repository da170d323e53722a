"""The engine core and the driver that started it live and die together.

Two directions, one module:

* **The engine core exits with its driver.** vLLM 0.32 starts the engine core as a
  ``daemon`` multiprocessing child (forked on GPUs, spawned on the CPU platform), but daemon
  children are only ended by the parent's ``atexit`` hook, which never runs when the driver
  is killed (SIGKILL, an unhandled SIGTERM, an OOM kill): the engine core then idles on
  forever as an orphan, holding a GPU's memory on a cluster node. :func:`child_environment`
  names the driver's pid for the child (``dlfp.harness.engine.start_engine`` sets it before vLLM
  starts it), and :func:`exit_with_parent`, which vLLM calls in every process it starts
  (engine core first, workers too) through this distribution's ``vllm.general_plugins``
  entry point, whatever scheduler the arm runs, starts a thread that waits for that pid to
  exit and then kills the engine core and its own children (vLLM's workers). It waits on a pidfd (Linux >= 5.3: no
  wake-ups at all while the driver lives) and polls once a second where there is none.
  It watches the driver *process*, unlike ``PR_SET_PDEATHSIG``, which fires when the
  thread that started the child ends: in Jupyter the engine is started from a worker
  thread (:func:`dlfp.harness.arm.run_coroutine`), which would make that the wrong event.
* **The driver notices when the engine core dies.** vLLM then fails every request in
  flight and every later one with ``EngineDeadError``; the client would record them as
  failed requests and the arm as complete. :func:`unless_engine_dies` turns that into
  :class:`EngineCoreDied`, so the arm is not kept and the run's manifest says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import psutil

PARENT_ENV = "DLFP_ENGINE_PARENT_PID"
"""Set by the driver for its engine core: the pid whose exit ends the engine core."""

POLL_S = 1.0
"""How often to look at the driver where the kernel has no pidfd (Linux < 5.3)."""

WATCH_ENGINE_S = 0.25
"""How often the driver checks whether the engine core is still alive during an arm."""

T = TypeVar("T")
_watched: set[int] = set()


class EngineCoreDied(RuntimeError):
    """The engine-core process died while an arm was running; the arm's data is void."""


def child_environment() -> dict[str, str]:
    """Environment to set before the engine core is started: this process is its driver."""
    return {PARENT_ENV: str(os.getpid())}


def exit_with_parent() -> None:
    """In the engine-core process: end this process (and its children) when the driver exits.

    A no-op unless the driver set :data:`PARENT_ENV`, and in the driver itself (an engine
    core run in-process with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
    """
    raw = os.environ.get(PARENT_ENV)
    if not raw:
        return
    try:
        pid = int(raw)
    except ValueError:
        raise ValueError(f"environment variable {PARENT_ENV}={raw!r} is not a process id") from None
    if pid == os.getpid() or pid in _watched:
        return
    _watched.add(pid)
    threading.Thread(target=_exit_when_gone, args=(pid,), name="dlfp-lifeline", daemon=True).start()


def _exit_when_gone(pid: int) -> None:
    wait_for_exit(pid)
    with contextlib.suppress(OSError):  # stderr is often a pipe the dead driver was reading
        print(f"dlfp: driver process {pid} has exited; engine core {os.getpid()} exits with it",
              file=sys.stderr, flush=True)
    kill_tree(os.getpid())


def wait_for_exit(pid: int) -> None:
    """Return once process ``pid`` has exited (a zombie counts as exited)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd_open: not Linux, or a kernel older than 5.3
        while _running(pid):
            time.sleep(POLL_S)
        return
    try:
        select.select([fd], [], [])  # readable once the process has exited
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s descendants, then ``pid`` (which may be this process)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def unless_engine_dies(engine: Any, work: Awaitable[T]) -> T:
    """Await ``work`` (a replay against ``engine``, an ``AsyncLLM``); raise
    :class:`EngineCoreDied` as soon as the engine core is found dead, or if it died by the
    time ``work`` finished: requests failed by a dead engine are not the system's behaviour.
    """
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            if engine.errored:
                break
            await asyncio.wait({task}, timeout=WATCH_ENGINE_S)
        if engine.errored:
            raise EngineCoreDied("the engine core process died during the arm "
                                 "(vLLM marked the engine dead); this arm's data is discarded")
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
