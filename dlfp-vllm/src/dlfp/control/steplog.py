"""Per-step records written by the scheduler, read back by the harness.

The engine core usually runs in its own process, so records travel through a JSON-lines
file: one object per completed step, buffered and flushed in batches so that the
scheduler's hot path never waits on a write (every 256 records or after a second, so a
long-running server's log stays current). Several engine starts may append to one
file; each start writes a header line first, so a reader can tell the runs apart. An engine that
starts over without a restart (:meth:`StepLog.segment`: the DLFP scheduler's reset, when an engine
is reused for another workload) writes one too, with its ``segment`` number.

A record is every :class:`~dlfp.control.signals.StepRecord` field, so a field added there
(``exec_done_t``, then ``complete_source``: which completion time the ``completion`` signal took,
``"exec_done"`` or ``"collect"``) reaches ``steps.parquet`` without a change here. Logs written
before a field existed lack its key: readers must treat a missing key as unknown, not as an error.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import fields
from operator import attrgetter
from pathlib import Path
from typing import Any

from dlfp.control.signals import StepRecord

FLUSH_EVERY = 256
FLUSH_AFTER_S = 1.0
_FIELDS = tuple(f.name for f in fields(StepRecord))
_values = attrgetter(*_FIELDS)


class StepLog:
    """Append-only JSON-lines sink for :class:`StepRecord` objects."""

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # An engine killed mid-write leaves a torn last line: end it, or this start's header would be
        # glued onto it, skipped as unreadable, and this start's records read as the killed one's.
        torn = self.path.is_file() and self.path.stat().st_size > 0 and not _ends_with_newline(self.path)
        self._buffer: list[str] = [*([""] if torn else []), json.dumps({"header": header})]
        self._closed = False
        self._flushed_at = 0.0
        self.flush()

    def add(self, record: StepRecord) -> None:
        # A StepRecord holds scalars and one flat map: reading its fields directly is asdict's result at a
        # tenth of its cost (asdict deep-copies recursively), which the scheduler's hot path pays every step.
        self._buffer.append(json.dumps(dict(zip(_FIELDS, _values(record), strict=True))))
        if len(self._buffer) >= FLUSH_EVERY or record.schedule_t - self._flushed_at > FLUSH_AFTER_S:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write("\n".join(self._buffer) + "\n")
            self._buffer.clear()
        self._flushed_at = time.monotonic()

    def segment(self, header: dict[str, Any], pending: list[StepRecord]) -> None:
        """Start a new segment: the steps still awaiting completion, then a header, flushed now, so a
        reader sees every record before it (an engine reused for another workload starts over)."""
        for record in pending:
            self.add(record)
        self._buffer.append(json.dumps({"header": header}))
        self.flush()

    def close(self, pending: list[StepRecord]) -> None:
        """Write steps still awaiting completion (``complete_t`` null), then flush."""
        if self._closed:
            return
        for record in pending:
            self.add(record)
        self.flush()
        self._closed = True


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def read_step_log(path: str | os.PathLike[str]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Yield ``(header, records)`` per engine start found in a step log.

    A torn last line (a killed engine) is skipped rather than failing the whole read.
    """
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "header" in obj:
                if header is not None:
                    yield header, records
                header, records = obj["header"], []
            else:
                records.append(obj)
    if header is not None:
        yield header, records
