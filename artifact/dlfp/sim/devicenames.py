"""What a device is called: the host CPU's name, the GPU model in a device name (``A100`` in
``NVIDIA A100-SXM4-80GB``), the shipped cost profile of that model, and why a profile of another
model must not be fitted to a GPU: fitted against another device's peaks and bandwidth, the
efficiencies would absorb the difference and model neither device. A GPU with no shipped profile
(an H100 is not an H200: 3.35 against 4.8 TB/s) is refused rather than given the nearest.

Two commands ask it: the GPU-node calibration (:mod:`dlfp.sim.gpucal`, which picks its base profile)
and the node check (:mod:`dlfp.cluster.gpucheck`, which picks the shipped config and profile). Pure
(the standard library and the profile list), so the calibration still runs without vLLM.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from dlfp.sim.costmodel import available_profiles


def cpu_name() -> str:
    """``CPU <model name>`` from ``/proc/cpuinfo`` (the machine type where it has none): a CPU dry run's
    device, as a profile records it."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU {line.split(':', 1)[1].strip()}"
    return f"CPU {platform.machine()}"

GPU_MODEL = re.compile(r"(?<![A-Za-z0-9])([A-Za-z]{1,2}\d{1,4}[A-Za-z]?)(?![A-Za-z0-9])")
"""A GPU model in a device name: ``A100`` in ``NVIDIA A100-SXM4-80GB``, ``H200`` in ``NVIDIA H200 SXM 141GB``."""


def gpu_model(device_name: str) -> str | None:
    """The GPU model a device name (CUDA's, or a profile's ``device``) names, upper case; None if none."""
    found = GPU_MODEL.search(device_name)
    return found.group(1).upper() if found else None


def shipped_base(device_name: str) -> str | None:
    """The shipped profile named by the GPU's model (``a100`` for an A100), None when none is shipped."""
    model = gpu_model(device_name)
    return model.lower() if model and model.lower() in available_profiles() else None


def base_mismatch(device_name: str, base_device: str) -> str | None:
    """Why a base profile describing ``base_device`` must not be fitted to ``device_name`` (None: it
    may; also when either names no GPU model, e.g. a YAML profile of a device of the user's own)."""
    gpu, base = gpu_model(device_name), gpu_model(base_device)
    if gpu is None or base is None or gpu == base:
        return None
    return (f"--base describes {base_device} ({base}), not this GPU, {device_name} ({gpu}): the fit would take the "
            f"{base}'s peaks and bandwidth for the {gpu}'s. Omit --base to use the shipped profile of this GPU, pass a "
            "YAML profile of its public specs, or --allow-base-mismatch to fit against this base anyway")


def choose_base(base: str | None, device_name: str | None) -> str:
    """The calibration's base profile: ``base`` as given, else the shipped profile of the GPU named
    ``device_name`` (None: a CPU dry run, which must name one). Raises ``ValueError`` saying what to pass."""
    if base is not None:
        return base
    if device_name is None:
        raise ValueError("--device cpu: pass --base (a dry run of the plumbing; e.g. --base a100)")
    chosen = shipped_base(device_name)
    if chosen is None:
        raise ValueError(f"no shipped cost profile for {device_name!r} (shipped: {', '.join(available_profiles())}): "
                         "pass --base with a YAML profile of its public specs (a copy of profiles/a100.yaml with its "
                         "numbers replaced)")
    return chosen
