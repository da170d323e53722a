"""Progress of a run as plain lines: one per unit of work and a few per arm, never a redrawn bar,
so that a terminal, a SLURM log file and a CI log read alike.

A line names the run folder, the trial (k/n), the arm and the unit (k/N), then the requests done,
the elapsed time and an estimate of what is left. An arm's estimate is the rest of its workload's
arrival span once its engine is up (an open-loop replay lasts about as long as its arrivals), plus,
while it is still starting, the rest of the last engine start-up seen in this run; the run's is
that plus the mean wall time of its finished units (those of earlier invocations included) times
the units after this one. An arm reports when its engine is up, at each quarter of its requests
(unless the last line is under :data:`MIN_GAP_S` old: a replay of a few seconds gets no more
lines than its start and its end), and at least every :data:`HEARTBEAT_S` while requests finish.

Where the lines go (:func:`progress_stream`): ``dlfp trial`` writes them to its stderr through a
duplicate of descriptor 2 made before the engines' output is sent to their log
(:func:`dlfp.harness.quiet.output_to` re-points descriptor 2 itself). A notebook kernel's stderr is
the notebook's (papermill stores it in the executed notebook), so ``dlfp pipeline`` names a file in
:data:`PROGRESS_ENV` for the kernels it starts (:func:`progress_sink`), they append their lines to
it, and the pipeline copies what is appended to its own stderr while each notebook runs
(:func:`relay`). A file, because the environment is what reliably reaches a kernel (jupyter_client
starts kernels with ``Popen``'s default ``close_fds=True`` and no ``pass_fds``: an inherited pipe
would be closed), and because a writer to a file never blocks on, or breaks with, a missing reader
(a fifo would).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from dlfp.harness.quiet import tail
from dlfp.trials.schema import Unit

PROGRESS_ENV = "DLFP_PROGRESS_FILE"
"""A file the runner appends its progress lines to instead of writing them to stderr."""
HEARTBEAT_S = 30.0
"""Longest quiet stretch of an arm whose requests keep finishing (a long GPU arm shows it lives)."""
MIN_GAP_S = 5.0
"""Shortest interval between two requests lines of an arm."""
QUARTERS = 4
TAIL_LINES = 20
"""Lines of the engines' log shown when a run fails."""
ARMS_SHOWN = 6
"""Arms a progress line names before it counts the rest (a capacity sweep has 161)."""


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``: as precise as a reader of an estimate needs."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def arm_names(arms: Sequence[str], most: int = ARMS_SHOWN) -> str:
    """``arms stock, dlfp``, or ``161 arms stock, stock_0.3, ... and 155 more``: a start line that
    stays one readable line however many arms a run has (``dlfp study --list`` prints them all)."""
    if len(arms) <= most:
        return f"arms {', '.join(arms)}"
    return f"{len(arms)} arms {', '.join(arms[:most])} and {len(arms) - most} more"


def arm_left_s(elapsed_s: float, span_s: float, replay_started_s: float | None = None,
               start_guess_s: float | None = None) -> float | None:
    """Seconds left in an arm ``elapsed_s`` after it began (module docstring); None while its engine
    starts and no earlier start-up says how long that takes. Never negative: a replay draining its
    last requests after the arrival span has ~0 s left."""
    if replay_started_s is not None:
        return max(0.0, replay_started_s + span_s - elapsed_s)
    if start_guess_s is None:
        return None
    return max(0.0, start_guess_s - elapsed_s) + span_s


def run_left_s(arm_left: float | None, unit_walls: Sequence[float], units_after: int,
               unit_guess_s: float | None = None) -> float | None:
    """Seconds left in the run: this arm's ``arm_left`` plus ``units_after`` units of the mean finished
    unit's wall time (``unit_guess_s`` before any unit finished); None when either is unknown."""
    per_unit = sum(unit_walls) / len(unit_walls) if unit_walls else unit_guess_s
    if arm_left is None or (units_after and per_unit is None):
        return None
    return arm_left + units_after * (per_unit or 0.0)


def due(done: int, total: int, last_done: int, since_last_s: float) -> bool:
    """Is a requests line due at ``done`` of ``total``, ``since_last_s`` after the last line (at
    ``last_done``): a quarter crossed since and :data:`MIN_GAP_S` passed, or :data:`HEARTBEAT_S`
    passed, with requests done since. The last request is not reported: the unit's line follows."""
    if done <= last_done or done >= total:
        return False
    crossed = done * QUARTERS // total > last_done * QUARTERS // total
    return (crossed and since_last_s >= MIN_GAP_S) or since_last_s >= HEARTBEAT_S


@contextlib.contextmanager
def progress_stream(enabled: bool = True) -> Iterator[TextIO | None]:
    """Where progress lines go (module docstring): the file named in :data:`PROGRESS_ENV`, else a
    duplicate of this process's stderr descriptor, else (a notebook's or a test's replaced
    ``sys.stderr``, which no descriptor redirect touches) ``sys.stderr`` itself; None when disabled."""
    if not enabled:
        yield None
    elif os.environ.get(PROGRESS_ENV):
        with open(os.environ[PROGRESS_ENV], "a", encoding="utf-8", buffering=1) as fh:
            yield fh
    elif (err := sys.stderr) is sys.__stderr__ and err is not None:
        err.flush()
        with open(os.dup(err.fileno()), "w", encoding="utf-8", buffering=1) as dup:  # closes the duplicate only
            yield dup
    else:
        yield sys.stderr


@contextlib.contextmanager
def progress_sink(folder: Path) -> Iterator[Path]:
    """A fresh file in ``folder`` named in :data:`PROGRESS_ENV` while the block runs, for the processes
    it starts (notebook kernels) to append their lines to; removed after. Enter it after the
    pipeline's own :func:`progress_stream`, which would otherwise open this file itself."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix="progress-", suffix=".log")
    os.close(fd)
    before = os.environ.get(PROGRESS_ENV)
    os.environ[PROGRESS_ENV] = name
    try:
        yield Path(name)
    finally:
        if before is None:
            os.environ.pop(PROGRESS_ENV, None)
        else:
            os.environ[PROGRESS_ENV] = before
        Path(name).unlink(missing_ok=True)


@contextlib.contextmanager
def relay(path: Path, out: TextIO, poll_s: float = 0.2) -> Iterator[None]:
    """Copy each complete line appended to ``path`` (after the block starts) to ``out`` while the block
    runs; what is left when it ends, a last line without its newline included, is copied then."""
    stop = threading.Event()

    def pump(fh: Any) -> None:
        pending = b""
        while True:
            chunk = fh.read()
            if chunk:
                pending += chunk
                lines, _, pending = pending.rpartition(b"\n")
                if lines:
                    out.write(lines.decode("utf-8", errors="replace") + "\n")
                    out.flush()
            elif stop.is_set():
                break
            else:
                stop.wait(poll_s)
        if pending:
            out.write(pending.decode("utf-8", errors="replace") + "\n")
            out.flush()

    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        thread = threading.Thread(target=pump, args=(fh,), name="dlfp-progress-relay", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


class RunProgress:
    """The progress lines of one ``run_trials`` call (module docstring); silent without a stream.

    ``clock`` is injectable so tests can check the arithmetic of the lines without waiting.
    """

    def __init__(self, out: Path, units: Sequence[Unit], stream: TextIO | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        out = Path(out)
        self.name = out.name or out.resolve().name
        self.stream, self.clock = stream, clock
        self.units = list(units)
        self.trials = len({u.trial for u in self.units})
        self.walls = [float(u.wall_s) for u in self.units if u.complete and u.wall_s is not None]
        self.started = clock()
        self.start_guess_s: float | None = None
        self.doing = "the run"
        self.label = ""
        self._lock = threading.Lock()
        self.workers = 1
        """Units running at once: a virtual run's estimate divides the units left among its workers."""

    def line(self, text: str) -> None:
        if self.stream is None:
            return
        with self._lock:
            self.stream.write(f"[{self.name}] {text}\n")
            self.stream.flush()

    def begin(self, log: Path) -> None:
        todo = sum(not u.settled for u in self.units)
        arms = list(dict.fromkeys(u.arm for u in self.units))
        trials = f"{self.trials} trial{'s' if self.trials != 1 else ''}"
        self.line(f"{todo} of {len(self.units)} units to run ({trials} x {arm_names(arms)}); "
                  f"engine output: {log}")

    def preflight(self, reference: str) -> None:
        self.doing = "the pre-flight"
        self.line(f"pre-flight: measuring the {reference} engine ...")

    def preflight_done(self, wall_s: float) -> None:
        self.doing = "the run"
        self.line(f"pre-flight done in {duration(wall_s)}")

    def unit(self, index: int, arm_requests: Sequence[Any], reused: bool = False) -> ArmProgress:
        """Announce unit ``index`` (on a fresh engine, or on the one the unit before it ran on);
        its replay reports through the returned callback."""
        self.label = self.unit_label(index)
        self.doing = f"{self.label}, {self.units[index].label}"
        arm = ArmProgress(self, len(arm_requests), max((r.arrival_s for r in arm_requests), default=0.0),
                          units_after=sum(not v.settled for v in self.units[index + 1:]),
                          reused=reused)
        self.line(f"{self.label}: {'engine reused' if reused else 'engine starting'}; {arm.status(arm.began)}")
        return arm

    def unit_label(self, index: int) -> str:
        u = self.units[index]
        return f"trial {u.trial + 1}/{self.trials} {u.arm} (unit {index + 1}/{len(self.units)})"

    def unit_skipped(self, index: int, record: Unit) -> None:
        """A unit that will not run (:mod:`dlfp.trials.stopping`): why, and what is left."""
        self.units[index] = record
        self.line(f"{self.unit_label(index)}: skipped: {record.skipped}; "
                  f"{sum(u.settled for u in self.units)}/{len(self.units)} units done")

    def unit_done(self, index: int, record: Unit) -> None:
        self.units[index] = record
        self.walls.append(float(record.wall_s or 0.0))
        finished = sum(u.settled for u in self.units)
        left = len(self.units) - finished
        eta = run_left_s(0.0, self.walls, left)
        eta = None if eta is None else eta / self.workers
        self.line(f"{self.unit_label(index)}: done in {duration(record.wall_s or 0.0)}; {finished}/{len(self.units)} "
                  f"units done, run {duration(self.clock() - self.started)} elapsed"
                  + (f", ~{duration(eta)} left" if left and eta is not None else ""))

    def stopped(self, exc: BaseException, signal_name: str | None, log: Path) -> None:
        """A failed run names what failed and shows the end of the engines' log; an interrupted one says so."""
        elapsed = duration(self.clock() - self.started)
        if signal_name is not None:
            self.line(f"interrupted by {signal_name} during {self.doing} after {elapsed}")
            return
        self.line(f"failed during {self.doing} after {elapsed}: {type(exc).__name__}: {exc}")
        lines = tail(log, TAIL_LINES)
        if lines:
            self.line(f"last {len(lines)} lines of {log}:")
            for text in lines:
                self.line(f"  | {text}")

    def finished(self, log: Path) -> None:
        self.line(f"complete: {len(self.units)} units, {duration(self.clock() - self.started)} in this run; "
                  f"engine output: {log}")


class ArmProgress:
    """One arm's lines: the callback its replay calls with 1 per finished request, and once with 0 as
    the replay starts (:func:`dlfp.harness.driver.drive`), which is when its engine is up."""

    def __init__(self, run: RunProgress, total: int, span_s: float, units_after: int, reused: bool = False) -> None:
        self.run, self.total, self.span_s, self.units_after = run, total, span_s, units_after
        self.reused = reused
        """On the engine of the unit before: no start to report, nor to learn the start time from."""
        self.began = self.reported_at = run.clock()
        self.done = self.reported = 0
        self.replay_started_s: float | None = None

    def status(self, now: float) -> str:
        """``done/total requests, elapsed, ~left (run: ~left)`` at ``now``; unknown estimates are left out."""
        elapsed, guess = now - self.began, self.run.start_guess_s
        left = arm_left_s(elapsed, self.span_s, self.replay_started_s, 0.0 if self.reused else guess)
        run = run_left_s(left, self.run.walls, self.units_after, None if guess is None else guess + self.span_s)
        return (f"{self.done}/{self.total} requests, {duration(elapsed)} elapsed"
                + ("" if left is None else f", ~{duration(left)} left")
                + ("" if run is None or not self.units_after else f" (run: ~{duration(run)} left)"))

    def __call__(self, n: int) -> None:
        now = self.run.clock()
        if n == 0 and self.replay_started_s is None:
            self.replay_started_s = now - self.began
            self.reported_at = now
            if not self.reused:
                self.run.start_guess_s = self.replay_started_s
                self.run.line(f"{self.run.label}: engine up after {duration(now - self.began)}; {self.status(now)}")
            return
        self.done += n
        if due(self.done, self.total, self.reported, now - self.reported_at):
            self.reported, self.reported_at = self.done, now
            self.run.line(f"{self.run.label}: {self.status(now)}")
