"""Edits of a copy of a committed run folder, as a writer bug, a hand edit or another machine would
make them, shared by the analysis tests and the GPU book test: copy, edit the manifest, rewrite a
table with its new checksum, and a whole GPU run fabricated from the CPU one (what a GPU node records:
the CUDA vLLM build, NVML's GPU records, ``gpu0`` telemetry; the traces themselves stay the CPU's).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.paths import REPO_ROOT, sha256, write_json_atomic
from dlfp.trials.runfolder import MANIFEST, write_parquet
from dlfp.trials.schema import Manifest, write_manifest

RUN = REPO_ROOT / "data" / "runs" / "cpu-default"
A100 = {"index": 0, "uuid": "GPU-5ad1c0de", "name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80.0, "driver": "580.65.06"}


def copy_run(tmp_path: Path, run: Path = RUN) -> Path:
    dest = tmp_path / run.name
    shutil.copytree(run, dest)
    return dest


def edit_manifest(run_dir: Path, edit: Callable[[dict[str, Any]], Any], sign: bool = False) -> None:
    """Apply ``edit`` to the manifest, as a hand edit would (its identity checksum left as it was), or, with
    ``sign``, as the run's own writer would (the checksum recomputed: what a real run of that identity has)."""
    m = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    edit(m)
    if sign:
        write_manifest(run_dir, Manifest.from_json(m, run_dir / MANIFEST))
    else:
        write_json_atomic(run_dir / MANIFEST, m)


def unit(m: dict[str, Any], trial: int, arm: str) -> dict[str, Any]:
    return next(u for u in m["units"] if u["trial"] == trial and u["arm"] == arm)


def rewrite_table(run_dir: Path, trial: int, arm: str, table: str, change: Callable[[pd.DataFrame], pd.DataFrame]
                  ) -> Path:
    """Replace one table with ``change(df)`` and record its new checksum, as a writer bug would."""
    path = run_dir / f"trial-{trial}" / arm / f"{table}.parquet"
    df = pd.read_parquet(path)
    write_parquet(change(df), path)
    digest = sha256(path)
    edit_manifest(run_dir, lambda m: unit(m, trial, arm)["files"].__setitem__(f"{table}.parquet", digest))
    return path


def claim_gpu(m: dict[str, Any], vllm: str | None = "0.32.0", gpus: bool = True) -> None:
    """The edit that turns the CPU run's manifest into a GPU run's: what a GPU node records."""
    if vllm is not None:
        m["versions"]["vllm"] = vllm
        if "cpu" not in vllm:  # the CUDA vLLM brings its CUDA torch
            m["versions"]["torch"] = "2.13.0+cu130"
    if gpus:
        m["hardware"].update(gpus=[A100], visible_gpus=[0], cuda_visible_devices="0")


def gpu_telemetry(run_dir: Path) -> None:
    """Every unit's telemetry as a GPU node samples it: the CPU's samples and NVML's ``gpu0``."""
    manifest = json.loads((run_dir / MANIFEST).read_text(encoding="utf-8"))
    for u in manifest["units"]:
        rewrite_table(run_dir, u["trial"], u["arm"], "telemetry",
                      lambda df: pd.concat([df, df.assign(source="gpu0")], ignore_index=True))


def fabricate_gpu_run(tmp_path: Path, model: str = "qwen3-0.6b", dtype: str = "bfloat16") -> Path:
    """A copy of the committed CPU run that reads as a measured A100 run of the paper's setting: GPU telemetry,
and the manifest signed as a GPU node's writer signs it (its identity checksum)."""
    run_dir = copy_run(tmp_path)
    gpu_telemetry(run_dir)

    def edit(m: dict[str, Any]) -> None:
        claim_gpu(m)
        m["config"]["engine"].update(model=model, dtype=dtype)
    edit_manifest(run_dir, edit, sign=True)
    return run_dir
