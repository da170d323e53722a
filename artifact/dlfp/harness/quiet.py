"""A process's own output into a log file while a block runs: an engine's, or a notebook kernel's.

vLLM and PyTorch talk on every engine start (Triton and NUMA notices, ``FutureWarning``\\ s, C++
warnings), from the driver and from the engine core and worker processes vLLM spawns. Those
children write to the file descriptors they inherit, so :func:`output_to` points descriptors 1
and 2 of this process at the log (``os.dup2``) before anything is spawned: every child started
inside the block writes there too, whatever it is. The Python level follows: ``sys.stdout`` and
``sys.stderr`` (in a Jupyter kernel they are not descriptors 1 and 2 but the notebook's streams),
so ``warnings`` and print go to the log, and ``logging`` handlers that were writing to those
streams (vLLM's, set up at import) are pointed at it for the block. Everything is put back on the
way out, however the block ends; a caller that wants to keep talking to the terminal meanwhile
writes to a duplicate of its stderr made before (:func:`dlfp.trials.progress.progress_stream`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def _stream_handlers(streams: tuple[object, ...]) -> list[tuple[logging.StreamHandler, object]]:
    """Every ``logging`` handler that holds one of ``streams`` as its own, with that stream. A handler
    whose ``stream`` is a property (``logging.lastResort``'s class) reads ``sys.stderr`` as it writes:
    it follows the redirect by itself, and its stream cannot be set."""
    loggers = [logging.getLogger(), *(x for x in logging.root.manager.loggerDict.values()
                                      if isinstance(x, logging.Logger))]
    found = {}
    for lg in loggers:
        for h in lg.handlers:
            held = vars(h).get("stream")
            if isinstance(h, logging.StreamHandler) and any(held is s for s in streams):
                found[id(h)] = (h, held)
    return list(found.values())


def _flush(*streams: object) -> None:
    for s in streams:
        with contextlib.suppress(Exception):  # a closed or foreign stream must not stop the redirect
            s.flush()  # type: ignore[attr-defined]


@contextlib.contextmanager
def output_to(log: Path, header: str | None = None) -> Iterator[Path]:
    """Append everything this process and the processes it starts print to ``log`` while the block
    runs (module docstring); ``header`` is written first, a line that says whose output follows.

    Yields ``log``. Descriptors 1 and 2 are duplicated before and restored after: a kernel's
    output watcher keeps its pipe, and the terminal gets its descriptors back.
    """
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    _flush(*streams)
    with open(log, "a", encoding="utf-8", errors="replace", buffering=1) as text:
        if header:
            text.write(f"{header}\n")
            text.flush()
        saved = (os.dup(1), os.dup(2))
        handlers = _stream_handlers(streams)
        old = sys.stdout, sys.stderr
        try:
            os.dup2(text.fileno(), 1)
            os.dup2(text.fileno(), 2)
            sys.stdout = sys.stderr = text
            for h, _ in handlers:
                h.setStream(text)
            yield log
        finally:  # descriptors first: whatever else fails, the terminal is back
            _flush(text, *streams)
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sys.stdout, sys.stderr = old
            for h, stream in handlers:
                h.setStream(stream)


def tail(log: Path, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of ``log`` (none when it does not exist): what a failure shows."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))  # enough for 20 lines of any log but a pathological one
            return fh.read().decode("utf-8", errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return []
