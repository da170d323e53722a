"""Ctrl-C and SIGTERM while trials run: the arm in flight is dropped, the finished ones are kept.

SLURM sends SIGTERM at a job's time limit and on ``scancel``; both signals raise
:class:`Interrupted` in the runner, which marks the manifest ``interrupted`` and says by which.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal: SIGINT (Ctrl-C) or SIGTERM (SLURM at the time limit, and
    ``scancel``; ``kill``). A ``KeyboardInterrupt``, so every cleanup path treats both alike;
    ``exit_code`` is the shell's convention, 128 + the signal number (130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signal = signal.Signals(signum)
        self.exit_code = 128 + int(self.signal)
        super().__init__(self.signal.name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


REDELIVER_S = 1.0
"""How often a stop signal is delivered again until the runner acts on it (see :func:`watch_interrupt`)."""


class StopSignal:
    """What :func:`watch_interrupt` saw: the stop signal, if any, and whether the runner is
    already recording the stop (from then on further signals are only noted)."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.stopping = False
        self.redelivered = False


def on_its_way_out(exc: BaseException | None) -> bool:
    """An :class:`Interrupted` is being handled (directly, or behind the ``CancelledError`` with
    which asyncio unwinds the tasks): cleanup, such as an engine's shutdown, is under way."""
    while exc is not None:
        if isinstance(exc, Interrupted):
            return True
        exc = exc.__context__
    return False


@contextlib.contextmanager
def watch_interrupt() -> Iterator[StopSignal]:
    """Raise :class:`Interrupted` on SIGINT and SIGTERM until the runner stops, and note the
    signal even when a library then reports it as another error.

    SIGINT reaches the whole process group (and SLURM sends SIGTERM to every process of the
    job): vLLM's engine core dies of it during start-up and the client then raises
    ``RuntimeError("Engine core initialization failed")``, which must still be recorded (and
    reported) as an interruption, not as a failure. vLLM 0.32 also swallows a
    ``KeyboardInterrupt`` raised while its client waits for a starting engine
    (``zmq_socket_ctx`` catches it): measured here, a SIGTERM then went unnoticed and the run
    carried on. So the signal is delivered again every :data:`REDELIVER_S` until the runner
    acts on it, except while the first one's cleanup is under way. A signal the caller
    ignores (SIG_IGN, e.g. SIGINT of a background job) stays ignored; another handler
    installed before ours (e.g. a notebook kernel's) still decides what a SIGINT does.
    """
    stop = StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signal handlers can only be installed from the main thread
        return
    # None: a handler installed outside Python, which could not be restored afterwards.
    previous = {s: h for s in STOP_SIGNALS if (h := signal.getsignal(s)) not in (signal.SIG_IGN, None)}
    done = threading.Event()
    redelivery: list[threading.Thread] = []

    def redeliver(signum: int) -> None:
        while not done.wait(REDELIVER_S) and not stop.stopping:
            stop.redelivered = True
            os.kill(os.getpid(), signum)

    def handler(signum: int, frame: Any) -> None:
        redelivered, stop.redelivered = stop.redelivered, False
        if stop.stopping or (redelivered and on_its_way_out(sys.exc_info()[1])):
            return  # a repeat must not cut short the cleanup of the first; a second Ctrl-C may
        sig = signal.Signals(signum)
        stop.signal = sig
        chained = previous[sig]
        if callable(chained) and chained is not signal.default_int_handler:
            chained(signum, frame)
            return
        if not redelivery:
            redelivery.append(threading.Thread(target=redeliver, args=(signum,), name="dlfp-stop", daemon=True))
            redelivery[0].start()
        raise Interrupted(signum)

    for s in previous:
        signal.signal(s, handler)
    try:
        yield stop
    finally:
        stop.stopping = True
        done.set()
        for thread in redelivery:
            thread.join()
        for s, h in previous.items():
            signal.signal(s, h)
