"""Capacity and goodput under SLOs, from the capacity study's run folders (traces only).

The study (:func:`dlfp.studies.plans.capacity`) writes one run folder per target, ``<root>/<target>/``,
whose arms are each arm of the study at each load (``<name>_<load>``); its design records every arm's
load and rate, the two SLO levels and the capacity bound (:mod:`dlfp.trials.sweep`). From the traces:

* per point, arm, trial and SLO level (:func:`point_rows`): its arrival span and send lateness, pooled
  P99 ITL, P99 TTFT, SLO attainment (the share of all requests with TTFT and TPOT within the level's
  SLOs, as ``vllm bench serve``'s goodput test) and goodput, the rate of arriving requests that meet
  both (offered rate x attainment: a run's duration includes the drain of its last requests, which a
  short point's count would make dominate). An arm that holds an SLO given to it (``<name>.<level>``)
  counts only at its own level; any other arm at both.
* per target, level and arm (:func:`capacity_table`): the capacity of each trial is the highest rate
  whose P99 ITL and P99 TTFT both stay within the SLOs, interpolated between the last point that
  meets them and the first that does not (linearly, on the worse of the two P99s over its SLO);
  a trial whose every point meets them is *censored above* (its capacity is at least the top rate),
  one whose lowest point fails *censored below*. Across trials: the mean and Student's t interval of
  uncensored capacities, and the mean ratio to stock's capacity in the same trial (paired by seed).

:func:`write_tables` writes ``capacity.parquet`` (one row per target, level and arm) and
``points.parquet`` beside the target folders, atomically, with ``points.json``: the sha256 of every
target's manifest and of the code that turns traces into points. Recomputing the points reads every
unit's traces (minutes per target), so the book reads ``points.parquet`` where that stamp still holds
(:func:`load_points`: the same manifests, each trace still matching its manifest's checksum, the same
code) and recomputes from the traces where it does not.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dlfp import metrics
from dlfp.analysis import families, labels, runs
from dlfp.analysis.families import family
from dlfp.analysis.labels import LATE_SEND_MS, source_line
from dlfp.analysis.runs import RunData, load_run
from dlfp.analysis.stats import t_ci
from dlfp.paths import sha256, write_json_atomic
from dlfp.trials import stopping
from dlfp.trials import sweep as sweep_design
from dlfp.trials.armid import ArmId
from dlfp.trials.arms import REFERENCE
from dlfp.trials.runfolder import verify_file, write_parquet
from dlfp.trials.schema import listed_files, read_manifest
from dlfp.trials.stopping import margin


def point_rows(run: RunData, target: str) -> pd.DataFrame:
    """One row per trial, finished unit and SLO level it is judged at (module docstring)."""
    sweep = (run.manifest.design or {})["sweep"]
    source = source_line(run)
    late = {(u.trial, u.arm): (u.send_lateness_ms or {}).get("p99", math.nan) for u in run.manifest.units}
    top = max(float(p["rate_rps"]) for p in sweep["arms"].values())  # the grid's, run or not (trials.stopping)
    rows = []
    for k, arm in sorted(run.tables):
        arm_id = ArmId.parse(arm)
        base, held = arm_id.base, arm_id.level
        fam = family(base, run.config.arm(arm))
        point = sweep["arms"][arm]
        requests, tokens = run.tables[(k, arm)]["requests"], run.tables[(k, arm)]["tokens"]
        summary = metrics.summarize(requests, tokens, math.inf, math.inf)
        for level in (held,) if held else sweep["slos"]:
            slo = sweep["slos"][level]
            attained = metrics.slo_compliance(requests, slo["ttft_ms"] / 1e3, slo["itl_ms"] / 1e3)
            rows.append({
                "target": target, "level": level, "arm": base, "family": fam, "unit_arm": arm, "trial": k,
                "seed": run.config.seeds[k], "load": point["load"], "rate_rps": point["rate_rps"],
                "itl_p99_ms": summary["itl_p99_ms"], "ttft_p99_ms": summary["ttft_p99_ms"],
                "itl_slo_ms": slo["itl_ms"], "ttft_slo_ms": slo["ttft_ms"], "attainment": attained,
                "goodput_rps": attained * point["rate_rps"], "span_s": point["n_requests"] / point["rate_rps"],
                "send_late_p99_ms": float(late.get((k, arm), math.nan)),
                "bound_rps": sweep["bound_rps"][level], "top_rate_rps": top, "source": source,
            })
    return pd.DataFrame(rows)


def trial_capacity(rates: Iterable[float], margins: Iterable[float]) -> tuple[float, str, float, float]:
    """(capacity, censored, bracket low, bracket high) of one trial's sweep (module docstring).

    Points are taken in rate order; the first failing point ends the search, so a rate that meets the
    SLOs again above a failure does not count (a queue past saturation does not recover)."""
    pts = sorted(zip(rates, margins, strict=True))
    if not pts or any(not math.isfinite(r) or r <= 0 for r, _ in pts):
        raise ValueError(f"a capacity needs positive finite rates; got {[r for r, _ in pts]}")
    if any(r1 == r0 for (r0, _), (r1, _) in itertools.pairwise(pts)):
        raise ValueError(f"a capacity sweep repeats a rate: {[r for r, _ in pts]}")
    for i, (r, m) in enumerate(pts):
        if not m <= 0:  # NaN (no gaps, nothing finished) fails too
            if i == 0:
                return 0.0, "below", 0.0, r
            r0, m0 = pts[i - 1]
            cross = r0 + (r - r0) * (-m0 / (m - m0)) if math.isfinite(m) else r0
            return min(r, max(r0, cross)), "none", r0, r  # rounding never leaves the bracket
    return pts[-1][0], "above", pts[-1][0], math.inf


def trial_capacities(points: pd.DataFrame) -> pd.DataFrame:
    """One row per target, level, arm and trial: :func:`trial_capacity` of the trial's sweep. A trial counts
    where its points are its target's lowest rates without a gap, and either all of them or up to a point that
    fails at this level: a sweep that stopped at a failure (:mod:`dlfp.trials.stopping`) is whole for its
    capacity, one missing a point below its failure is not."""
    per_trial = []
    grids = points.groupby("target")["rate_rps"].agg(lambda r: sorted(set(r)))
    for (target, level, arm, trial), g in points.groupby(["target", "level", "arm", "trial"], sort=False):
        g = g.sort_values("rate_rps")
        m = [margin(*row) for row in g[["itl_p99_ms", "ttft_p99_ms", "itl_slo_ms", "ttft_slo_ms"]].to_numpy()]
        grid, rates = grids[target], g["rate_rps"].tolist()
        if rates != grid[:len(rates)] or (len(rates) < len(grid) and all(x <= 0 for x in m)):
            continue
        cap, censored, lo, hi = trial_capacity(g["rate_rps"].tolist(), m)
        per_trial.append({"target": target, "level": level, "arm": arm, "trial": trial, "capacity_rps": cap,
                          "censored": censored, "bracket_low_rps": lo, "bracket_high_rps": hi})
    return pd.DataFrame(per_trial, columns=["target", "level", "arm", "trial", "capacity_rps", "censored",
                                            "bracket_low_rps", "bracket_high_rps"])


def capacity_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per target, level and arm: capacity, interval, brackets, SLOs, bound (module docstring)."""
    trials = trial_capacities(points)
    if trials.empty:
        return pd.DataFrame(columns=COLUMNS)
    stock = trials[trials.arm == REFERENCE].set_index(["target", "level", "trial"])["capacity_rps"]
    families = points.groupby(["target", "level", "arm"])["family"].first()
    late = points.assign(late=points["send_late_p99_ms"] > LATE_SEND_MS).groupby(["target", "level", "arm"])["late"]
    facts = points.groupby(["target", "level"]).agg(
        itl_slo_ms=("itl_slo_ms", "first"), ttft_slo_ms=("ttft_slo_ms", "first"),
        bound_rps=("bound_rps", "first"), source=("source", "first"),
        min_rate_rps=("rate_rps", "min"), max_rate_rps=("top_rate_rps", "max"), span_s=("span_s", "min"))
    rows = []
    for (target, level, arm), g in trials.groupby(["target", "level", "arm"], sort=False):
        caps = g["capacity_rps"].to_numpy(dtype=float)
        estimated = bool(g["censored"].eq("none").all())  # else the mean is a bound, with no interval
        value, lo, hi = t_ci(caps) if estimated and len(caps) >= 2 else (float(caps.mean()), math.nan, math.nan)
        ref = [stock.get((target, level, k), math.nan) for k in g["trial"]]
        ratios = [c / s for c, s in zip(caps, ref, strict=True) if s > 0 and math.isfinite(s)]
        f = facts.loc[(target, level)]
        rows.append({
            "target": target, "level": level, "arm": arm, "family": families[(target, level, arm)],
            "capacity_rps": value,
            "ci_low_rps": lo, "ci_high_rps": hi,
            "n_trials": len(g), "censored": _censored(g["censored"]),
            "bracket_low_rps": float(g["bracket_low_rps"].min()),
            "bracket_high_rps": float(g["bracket_high_rps"].max()),
            "vs_stock": float(np.mean(ratios)) if len(ratios) == len(g) else math.nan,
            "share_of_bound": value / f["bound_rps"] if f["bound_rps"] > 0 else math.nan,
            "resolution": sweep_design.resolution(f["ttft_slo_ms"], f["span_s"]),
            "late_points": int(late.sum()[(target, level, arm)]), "n_points": int(late.size()[(target, level, arm)]),
            **{c: f[c] for c in ("itl_slo_ms", "ttft_slo_ms", "bound_rps", "min_rate_rps", "max_rate_rps", "source")},
        })
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = ["target", "level", "arm", "family", "capacity_rps", "ci_low_rps", "ci_high_rps", "n_trials", "censored",
           "bracket_low_rps", "bracket_high_rps", "vs_stock", "share_of_bound", "resolution", "late_points",
           "n_points", "itl_slo_ms", "ttft_slo_ms", "bound_rps", "min_rate_rps", "max_rate_rps", "source"]
"""``capacity.parquet``'s columns; ``censored`` is none (interpolated), above (at least the top rate),
below (under the lowest) or mixed across trials; a censored row has no interval (its mean is a
bound, not an estimate). ``resolution`` is the largest overload the sweep's shortest point could let
pass under the level's TTFT SLO (:func:`dlfp.trials.sweep.resolution`): a capacity may overstate the
sustainable rate by up to that share. ``late_points`` of the arm's ``n_points`` (all trials) had their
requests sent later than :data:`~dlfp.analysis.labels.LATE_SEND_MS` (p99): a disturbed arrival process."""


def _censored(values: pd.Series) -> str:
    """One word for a row: none, above or below where every trial agrees, else mixed."""
    kinds = set(values)
    return kinds.pop() if len(kinds) == 1 else "mixed"


def study_points(root: Path, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every finished unit of the capacity runs under ``root`` (``<target>/``) as :func:`point_rows`;
    an unfinished run counts with the units it has. ``progress`` is told each target as its traces
    are read (about a minute each)."""
    frames = []
    manifests = _manifests(root)
    for k, manifest in enumerate(manifests, 1):
        if progress:
            progress(f"reading {manifest.parent} ({k}/{len(manifests)})")
        run = load_run(manifest.parent, tables=("requests", "tokens"), allow_partial=True)
        if "sweep" in (run.manifest.design or {}):
            frames.append(point_rows(run, manifest.parent.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def unfinished(root: Path) -> dict[str, str]:
    """The capacity runs under ``root`` whose manifest is not complete, each with how many of its units
    are done. The book leaves them out of its tables and names them: a target's capacities from part of
    its sweep would read as the target's. A long run is committed in place while it runs over several
    sessions, and resumes there."""
    out = {}
    for manifest in _manifests(root):
        m = read_manifest(manifest.parent)
        if not m.complete:
            out[manifest.parent.name] = f"{sum(u.settled for u in m.units)} of {len(m.units)} units"
    return out


POINTS, STAMP = "points.parquet", "points.json"
POINT_CODE = (sys.modules[__name__], metrics, families, labels, runs, sweep_design, stopping)
"""The modules whose source decides a point's numbers: a change to any of them makes a stamp stale."""


def _manifests(root: Path) -> list[Path]:
    return sorted(Path(root).glob("*/manifest.json"))


def code_key() -> str:
    """The sha256 of the source of :data:`POINT_CODE`."""
    h = hashlib.sha256()
    for module in POINT_CODE:
        h.update(Path(inspect.getfile(module)).read_bytes())
    return h.hexdigest()


def stamp(root: Path) -> dict[str, Any]:
    """What ``points.parquet`` under ``root`` is computed from: each target's manifest and the code."""
    return {"manifests": {m.parent.name: sha256(m) for m in _manifests(root)}, "code": code_key()}


def stale(root: Path) -> str | None:
    """Why ``points.parquet`` under ``root`` may not stand for its traces, or None where it does: its
    stamp records other manifests or other code, it was changed since, or a trace no longer matches
    its manifest (checked as :func:`load_run` does, which reads none of them)."""
    root = Path(root)
    if not (root / STAMP).is_file() or not (root / POINTS).is_file():
        return f"{root} has no {POINTS} with its {STAMP}"
    try:
        recorded = json.loads((root / STAMP).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"{root / STAMP} is corrupt ({exc})"
    if not isinstance(recorded, dict):
        return f"{root / STAMP} is corrupt (not an object)"
    now = stamp(root)
    if recorded.get("manifests") != now["manifests"]:
        return f"the runs under {root} changed since {POINTS} was written"
    if recorded.get("code") != now["code"]:
        return f"the code that computes the points changed since {POINTS} was written"
    if recorded.get("points") != sha256(root / POINTS):
        return f"{root / POINTS} was changed since it was written"
    for manifest in _manifests(root):
        for file, digest in listed_files(manifest.parent, read_manifest(manifest.parent)):
            verify_file(file, digest)  # a trace edited under an unchanged manifest is refused, as load_run does
    return None


def load_points(root: Path) -> tuple[pd.DataFrame, str | None]:
    """The study's points and why they were recomputed from the traces (None: read from a stamped
    ``points.parquet``, :func:`stale`)."""
    if not _manifests(root):
        return pd.DataFrame(), None
    why = stale(root)
    return (study_points(root), why) if why else (pd.read_parquet(Path(root) / POINTS), None)


def write_tables(root: Path, progress: Callable[[str], None] | None = None) -> list[Path]:
    """``points.parquet``, its stamp and ``capacity.parquet`` under ``root`` (none when no point has
    finished); the stamp is taken before the traces are read, so a run changing meanwhile leaves it stale.
    ``points.parquet`` holds every finished point, of unfinished runs too (the book reads it and leaves
    those out); ``capacity.parquet`` only the finished runs' capacities (:func:`unfinished`): a target's
    capacity from part of its sweep is not its capacity. ``progress``: as :func:`study_points`."""
    root = Path(root)
    before = stamp(root)
    points = study_points(root, progress)
    if points.empty:
        return []
    paths = [root / POINTS, root / "capacity.parquet", root / STAMP]
    write_parquet(points, paths[0])
    write_parquet(capacity_table(points[~points.target.isin(unfinished(root))]), paths[1])
    write_json_atomic(paths[2], {**before, "points": sha256(paths[0])})
    return paths
