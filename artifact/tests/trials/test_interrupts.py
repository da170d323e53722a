"""Ctrl-C and SIGTERM while trials run (``dlfp.trials.interrupts``): delivery, redelivery, cancellation."""

from __future__ import annotations

import pytest

from dlfp.trials import interrupts, runner
from dlfp.trials.config import parse_config
from tests.trials.fakes import CONFIG, manifest


def test_an_ignored_signal_stays_ignored() -> None:
    """``nohup``-style or background jobs ignore SIGINT: the runner must not un-ignore it."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.watch_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_swallowed_signal_is_delivered_again(tmp_path, fake, monkeypatch) -> None:
    """vLLM 0.32 swallows a KeyboardInterrupt raised while its client waits for a starting engine
    (``zmq_socket_ctx``); the runner delivers the signal again until it stops the run."""
    import os
    import signal
    import time

    arms = fake()
    real = arms.__call__
    swallowed: list[float] = []

    def engine_start_that_swallows(spec, requests, step_log, progress=None, telemetry_interval_s=0.5, warmup=()):
        if len(arms.calls) == 1:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                swallowed.append(time.monotonic())  # as vLLM does: logged, then carry on
            time.sleep(5)  # the rest of the start-up and the arm
            raise AssertionError("the swallowed SIGTERM was not delivered again")
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", engine_start_that_swallows)
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    assert stopped.value.exit_code == 143 and len(swallowed) == 1
    assert time.monotonic() - swallowed[0] < interrupts.REDELIVER_S + 1
    m = manifest(tmp_path / "run")
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_the_repeat_delivery_does_not_cut_an_engine_shutdown_short(tmp_path, fake, monkeypatch) -> None:
    import asyncio
    import os
    import signal
    import threading
    import time

    arms = fake()
    shutdown: list[str] = []

    async def replay() -> None:
        try:
            await asyncio.sleep(30)
        except BaseException:  # asyncio unwinds the arm's task with CancelledError
            time.sleep(2.5 * interrupts.REDELIVER_S)  # engine.shutdown(), with repeats arriving meanwhile
            shutdown.append("done")
            raise

    def arm_stopped_mid_replay(spec, requests, step_log, progress=None, telemetry_interval_s=0.5, warmup=()):
        arms.calls.append(spec.dlfp["enabled"])
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        asyncio.run(replay())

    monkeypatch.setattr("dlfp.harness.arm.run_arm", arm_stopped_mid_replay)
    with pytest.raises(interrupts.Interrupted):
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    assert shutdown == ["done"] and manifest(tmp_path / "run")["interrupted_by"] == "SIGTERM"


def test_an_interrupt_cancels_the_coroutine_running_on_the_worker_thread(sigint_raises: None) -> None:
    """In a Jupyter kernel an arm runs on a worker thread; Ctrl-C must stop it, not leave it running."""
    import asyncio
    import signal
    import threading

    from dlfp.harness.arm import run_coroutine

    cancelled = threading.Event()

    async def arm() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def kernel() -> None:  # a running loop, as in a notebook
        main = threading.main_thread().ident
        threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()  # Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            run_coroutine(arm())

    loop = asyncio.new_event_loop()  # not asyncio.run, whose own SIGINT handler would swallow the Ctrl-C
    try:
        loop.run_until_complete(kernel())
    finally:
        loop.close()
    assert cancelled.is_set()
