"""How long a command takes, measured and recorded where the pages read it.

The README and the reference pages say how long ``make test``, ``make artifact`` and ``dlfp plan``
take. A duration typed into a page cannot be traced and goes stale with the next change; so each is
measured by ``dlfp bench timed``, which runs the command (in a fresh clone of HEAD with
``--fresh-clone``: what a reviewer's first run costs, set-up included) and writes a record,
``data/timings/NAME.json``: the command, the commit, the machine, the date, the wall time, the exit
status and the counts of every pytest session it printed. A page states the duration in the words
:func:`duration_words` makes from the record, once; ``artifact/tests/bench/test_timed.py`` holds the
pages to the records.

A record is written only for a command that ran to its end (a failed one too: its status says so, and
no page may cite it); an interrupted measurement leaves the previous record as it was.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dlfp.paths import REPO_ROOT, write_json_atomic

TIMINGS = REPO_ROOT / "data" / "timings"
"""Where the committed records live, one per measured command."""
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>\d+(?:\.\d+)?)s\b")
"""pytest's last line: "1800 passed, 2 skipped, 31 deselected in 284.77s (0:04:44)" (``-q``, or inside
``=`` rules)."""


def pytest_sessions(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Each pytest session's summary in the output, in order: its counts and its seconds."""
    sessions = []
    for line in lines:
        m = PYTEST_SUMMARY.match(line.strip())
        if m:
            counts = {word: int(n) for n, word in (c.split(" ", 1) for c in m["counts"].split(", "))}
            sessions.append({"counts": counts, "seconds": float(m["seconds"])})
    return sessions


PIPELINE_DONE = re.compile(r"^\[pipeline\] (?P<name>\S+) done in (?P<took>.+?) \(notebook \d+/\d+\)$")
PIPELINE_TOTAL = re.compile(r"^\[pipeline\] .*\btotal (?P<took>.+?); kernel output in ")
"""``dlfp pipeline``'s own lines (:mod:`dlfp.book.pipeline`): each notebook's end, and the job's total."""
_TOOK = re.compile(r"^(?:(?P<h>\d+) h )?(?:(?P<m>\d+) min)? ?(?:(?P<s>\d+) s)?$")


def _seconds(took: str) -> float | None:
    """``1 h 02 min``, ``3 min 05 s`` or ``42 s`` (:func:`dlfp.trials.progress.duration`) in seconds."""
    m = _TOOK.match(took.strip())
    if m is None or not any(m.groups()):
        return None
    return float(int(m["h"] or 0) * 3600 + int(m["m"] or 0) * 60 + int(m["s"] or 0))


def pipeline_phases(lines: Iterable[str]) -> dict[str, float]:
    """What a ``dlfp pipeline`` run printed of its phases: each notebook's seconds, in order, and ``total`` (the
    notebooks and the book build); empty for another command."""
    phases: dict[str, float] = {}
    for line in lines:
        text = line.strip()
        for pattern, key in ((PIPELINE_DONE, None), (PIPELINE_TOTAL, "total")):
            m = pattern.match(text)
            took = _seconds(m["took"]) if m else None
            if m and took is not None:
                phases[key or m["name"]] = took
    return phases


def phase_words(record: Mapping[str, Any]) -> str:
    """The phases of a timed pipeline as a page states them: "set-up 2 min 5 s, 00_verify 1 min 8 s, ..., the
    book 40 s" (set-up: the wall time before the pipeline's total; the book: its total after the notebooks)."""
    phases = dict(record.get("phases") or {})
    total = phases.pop("total", None)
    if total is None:
        raise ValueError(f"timing {record.get('name')!r}: no pipeline phases were recorded")
    words = [f"set-up {minutes(record['wall_s'] - total)}"] + [f"{k} {minutes(v)}" for k, v in phases.items()]
    return ", ".join([*words, f"the book {minutes(max(0.0, total - sum(phases.values())))}"])


def minutes(seconds: float) -> str:
    """2661.4 -> "44 min 21 s"; under a minute, "48 s"."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def duration_words(record: Mapping[str, Any]) -> str:
    """The duration as a page states it: "44 min 21 s on a 2-core AMD EPYC 7B13 CPU (a fresh clone of
    `1a2b3c4d`, 2026-12-07; pytest: 1735 passed in 2186 s, then 262 passed in 111 s)"."""
    if record.get("returncode") != 0:
        raise ValueError(f"timing {record.get('name')!r}: the command failed (exit status {record.get('returncode')}), "
                         "so no page may state its duration")
    where = "a fresh clone of" if record["fresh_clone"] else "commit"
    commit = str(record["git"]["commit"])[:8] + (" with uncommitted changes" if record["git"].get("dirty") else "")
    tests = ", then ".join(f"{s['counts'].get('passed', 0)} passed in {round(s['seconds'])} s"
                           for s in record.get("pytest", []))
    return (f"{minutes(record['wall_s'])} on a {record['machine']} ({where} `{commit}`, {record['date'][:10]}"
            + (f"; pytest: {tests}" if tests else "") + ")")


def read_timing(name: str, folder: Path = TIMINGS) -> dict[str, Any]:
    """The record ``folder/NAME.json``, refused where it is not that command's record."""
    path = folder / f"{name}.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"timing {name!r}: cannot read {path} ({exc})") from None
    if not isinstance(record, dict) or record.get("name") != name:
        raise ValueError(f"timing {name!r}: {path} is not its record")
    return record


def _clone(workdir: Path) -> Path:
    """A fresh clone of this checkout's HEAD (what CI and a reviewer start from: nothing uncommitted)."""
    target = workdir / "dlfp"
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(target)], check=True, timeout=600)
    return target


def _run(command: list[str], cwd: Path, log: Path) -> tuple[int, list[str]]:
    """Run ``command`` in its own process group, its output to the terminal and to ``log``; Ctrl-C or
    SIGTERM stops the whole group and raises KeyboardInterrupt (no record)."""
    lines: list[str] = []
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                out.write(line)
                lines.append(line)
            return proc.wait(), lines
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)


def measure(name: str, command: list[str], fresh_clone: bool, out: Path = TIMINGS, keep: bool = False,
            workdir: Path | None = None, allow_dirty: bool = False) -> dict[str, Any]:
    """Run ``command`` (in a fresh clone of HEAD, or here) and write ``out/NAME.json``; returns the record."""
    from dlfp.analysis.labels import cpu_host
    from dlfp.harness.telemetry import describe_hardware
    from dlfp.trials.provenance import start_record

    if not NAME.fullmatch(name):
        raise ValueError(f"--name {name!r}: lower-case letters, digits and '-' (it names data/timings/NAME.json)")
    if not command:
        raise ValueError("no command to time: give it after --, e.g. dlfp bench timed --name make-test -- .ci/run")
    out.mkdir(parents=True, exist_ok=True)  # before the run: a folder that cannot be made loses no measurement
    scratch = Path(tempfile.mkdtemp(prefix=f"dlfp-timed-{name}-", dir=workdir))
    try:
        cwd = _clone(scratch) if fresh_clone else REPO_ROOT
        git = start_record(allow_dirty, root=cwd)
        if fresh_clone and start_record(True)["dirty"]:
            print("dlfp bench timed: this checkout has uncommitted changes; the fresh clone times HEAD without them",
                  file=sys.stderr)
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        print(f"dlfp bench timed: {' '.join(command)} in {cwd} (log: {scratch / 'output.log'})", file=sys.stderr)
        t0 = time.monotonic()
        returncode, lines = _run(command, cwd, scratch / "output.log")
        wall_s = time.monotonic() - t0
    except BaseException:
        print(f"dlfp bench timed: no record written; the scratch folder {scratch} is kept", file=sys.stderr)
        raise
    record = {"name": name, "command": command, "fresh_clone": fresh_clone, "git": git,
              "machine": cpu_host(describe_hardware()), "date": started, "wall_s": round(wall_s, 1),
              "returncode": returncode, "pytest": pytest_sessions(lines),
              **({"phases": phases} if (phases := pipeline_phases(lines)) else {})}
    write_json_atomic(out / f"{name}.json", record)
    print(f"dlfp bench timed: {name}: {minutes(wall_s)}, exit status {returncode} -> {out / f'{name}.json'}",
          file=sys.stderr)
    if not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp bench timed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="the record's name: data/timings/NAME.json (e.g. make-test)")
    ap.add_argument("--fresh-clone", action="store_true", help="run it in a fresh clone of HEAD (set-up included)")
    ap.add_argument("--out", type=Path, default=TIMINGS, help="folder of the records (default data/timings)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder (clone and output.log)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the scratch folder goes (default: $TMPDIR)")
    ap.add_argument("--allow-dirty", action="store_true", help="time uncommitted code (recorded)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- .ci/run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    record = measure(args.name, command, args.fresh_clone, args.out, args.keep, args.workdir, args.allow_dirty)
    print(duration_words(record) if record["returncode"] == 0 else f"failed: exit status {record['returncode']}")
    return 0 if record["returncode"] == 0 else 1
