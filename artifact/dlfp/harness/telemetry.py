"""Hardware telemetry sampled in the background while a trial arm runs.

Latency differences between arms are only credible if the hardware behaved the same in
both: a throttled clock or a neighbour's load shows up here rather than being silently
blamed on the scheduler. Samples are stamped with ``time.monotonic()`` relative to the
trial's ``t0`` (the clock the client trace and the engine step records use), so they line
up with both on one time axis.

CPU metrics come from psutil and are always present. NVIDIA GPU metrics come from NVML
(``nvidia-ml-py``, imported as ``pynvml``) when it imports, initialises and sees at least
one device. Telemetry is a side channel: a failing probe records nothing for that metric
and sampling carries on; it must never end a trial.

Which GPUs. NVML lists every GPU of the node whatever ``CUDA_VISIBLE_DEVICES`` says, so "the
first NVML device" may be one the engine never touched. An engine with tensor parallelism
``tp`` runs on CUDA devices ``0 .. tp-1``, i.e. the first ``tp`` entries of
``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs). :func:`visible_gpus` maps those entries to
NVML indices, assuming CUDA numbers devices in PCI bus order as NVML does (vLLM makes the same
assumption; set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` on nodes with mixed GPU models). The sampler
records GPU ``k`` of its list as source ``gpu<k>`` (the engine's ``cuda:<k>``), and
:func:`describe_hardware` records the node's GPUs with NVML index and UUID, the raw
``CUDA_VISIBLE_DEVICES`` and the visible NVML indices in CUDA order, so a manifest says which
GPUs a run used (:func:`dlfp.analysis.labels.measured_on`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType, TracebackType
from typing import Any

import pandas as pd
import psutil

GIB = float(2**30)
MAX_INTERVAL_S = 60.0
COLUMNS = ("t_s", "source", "metric", "value")

# (source, metric, probe); a probe returns None when its value is unavailable this time.
Probe = tuple[str, str, Callable[[], float | None]]


def visible_gpus(cuda_visible_devices: str | None, uuids: Sequence[str | None]) -> list[int]:
    """NVML indices of the GPUs CUDA shows a process, in CUDA's order (module docstring).

    ``uuids``: every NVML device's UUID by NVML index. Unset means all devices. As CUDA does,
    the list ends at the first entry that names no device (``-1``, an index out of range, an
    unknown or ambiguous UUID prefix, a repeat); a MIG instance also ends it here (NVML samples
    MIG slices differently, so no telemetry is claimed for them).
    """
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        if entry.isdigit() and int(entry) < len(uuids):
            index = int(entry)
        elif entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u is not None and u.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            break
        if index in out:
            break
        out.append(index)
    return out


def _nvml_open(gpus: Sequence[int] | None = None) -> tuple[ModuleType, list[Any]] | None:
    """``(pynvml, device handles)`` with NVML initialised, or None where GPU sampling is off.

    ``gpus``: NVML indices to open, in order; None: the GPUs visible to this process. The
    caller owns the initialisation and must call ``nvmlShutdown``. Any failure (package
    missing, no driver, no devices) means "no GPU telemetry", not an error.
    """
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        indices = _visible(nvml) if gpus is None else list(gpus)
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
    except Exception:
        handles = []
    if not handles:
        _nvml_close(nvml)
        return None
    return nvml, handles


def _uuids(nvml: ModuleType) -> list[str | None]:
    """Every NVML device's UUID by NVML index (None where the driver will not say)."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    return [_safe(lambda h=h: _text(nvml.nvmlDeviceGetUUID(h))) for h in handles]


def _visible(nvml: ModuleType) -> list[int]:
    return visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), _uuids(nvml))


def engine_gpus(tensor_parallel_size: int) -> list[int]:
    """NVML indices of the GPUs an engine with this TP size starts on from this process: the
    first ``tensor_parallel_size`` visible ones ([] without NVML), for :class:`TelemetrySampler`."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        return _visible(nvml)[:tensor_parallel_size]
    except Exception:
        return []
    finally:
        _nvml_close(nvml)


def _nvml_close(nvml: ModuleType) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _cpu_freq_mhz() -> float | None:
    freq = psutil.cpu_freq()  # None (or absent fields) on platforms that do not expose it
    return None if freq is None else float(freq.current)


def _cpu_probes() -> list[Probe]:
    return [
        ("cpu", "util_pct", lambda: float(psutil.cpu_percent(interval=None))),
        ("cpu", "freq_mhz", _cpu_freq_mhz),
        ("cpu", "mem_used_gib", lambda: psutil.virtual_memory().used / GIB),
    ]


def _gpu_probes(nvml: ModuleType, handles: list[Any]) -> list[Probe]:
    probes: list[Probe] = []
    for i, h in enumerate(handles):
        src = f"gpu{i}"
        # Default argument binds this device's handle; a plain closure would see the last one.
        probes += [
            (src, "util_pct", lambda h=h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)),
            (src, "sm_clock_mhz", lambda h=h: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))),
            (src, "mem_used_gib", lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h).used / GIB),
            (src, "power_w", lambda h=h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ]
    return probes


class TelemetrySampler:
    """Samples CPU (and NVIDIA GPU) metrics every ``interval_s`` on a daemon thread.

    Use as a context manager around the arm. The first sample is taken one interval after
    entry, because ``util_pct`` is a utilisation *since the previous call* and needs an
    interval behind it; a block shorter than ``interval_s`` therefore records nothing.
    ``gpus``: NVML indices of the GPUs to sample, the engine's (:func:`engine_gpus`); None: every
    GPU visible to this process (``CUDA_VISIBLE_DEVICES``), which is the engine's when a job
    is given exactly the GPUs it uses, as SLURM and ``dlfp gpu-check`` do.
    """

    def __init__(self, interval_s: float = 0.5, t0_monotonic: float | None = None,
                 gpus: Sequence[int] | None = None) -> None:
        if not 0 < interval_s <= MAX_INTERVAL_S:
            raise ValueError(f"interval_s={interval_s!r} is invalid; allowed: 0 < interval_s <= "
                             f"{MAX_INTERVAL_S:g} seconds")
        self.interval_s = float(interval_s)
        self.t0_monotonic = time.monotonic() if t0_monotonic is None else float(t0_monotonic)
        self._rows: list[tuple[float, str, str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: ModuleType | None = None
        self._probes: list[Probe] = []
        self.gpus = None if gpus is None else list(gpus)

    def __enter__(self) -> TelemetrySampler:
        if self._thread is not None:
            raise RuntimeError("TelemetrySampler is single-use; create a new one per arm")
        self._probes = _cpu_probes()
        opened = _nvml_open(self.gpus)
        if opened is not None:
            self._nvml = opened[0]
            self._probes += _gpu_probes(*opened)
        psutil.cpu_percent(interval=None)  # start the utilisation window now
        self._thread = threading.Thread(target=self._run, name="dlfp-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._nvml is not None:
            _nvml_close(self._nvml)
            self._nvml = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        """One sample of every probe, all stamped with the sample's start time."""
        t_s = time.monotonic() - self.t0_monotonic
        rows = []
        for source, metric, probe in self._probes:
            try:
                value = probe()
            except Exception:  # a telemetry hiccup must not stop sampling, let alone the trial
                continue
            if value is not None:
                rows.append((t_s, source, metric, float(value)))
        with self._lock:
            self._rows.extend(rows)

    def frame(self) -> pd.DataFrame:
        """The samples so far in long format: ``t_s, source, metric, value``."""
        with self._lock:
            rows = list(self._rows)
        df = pd.DataFrame(rows, columns=list(COLUMNS))
        return df.astype({"t_s": "float64", "source": "object", "metric": "object", "value": "float64"})


def _cpu_model() -> str:
    """The CPU's marketing name; ``platform.processor()`` is often empty or just "x86_64" on Linux."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return platform.processor()


def _gpus() -> dict[str, Any]:
    """Every NVIDIA GPU of the node (NVML index, UUID, name, memory, driver) and the NVML indices
    of those visible to this process in CUDA's order; no GPUs when NVML is unavailable."""
    visible_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    none: dict[str, Any] = {"gpus": [], "cuda_visible_devices": visible_env, "visible_gpus": []}
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return none
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        uuids = _uuids(nvml)
        gpus = []
        for i, uuid in enumerate(uuids):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append({"index": i, "uuid": uuid, "name": _text(nvml.nvmlDeviceGetName(h)),
                         "memory_gib": nvml.nvmlDeviceGetMemoryInfo(h).total / GIB, "driver": driver})
        return {"gpus": gpus, "cuda_visible_devices": visible_env, "visible_gpus": visible_gpus(visible_env, uuids)}
    except Exception:
        return none
    finally:
        _nvml_close(nvml)


def _text(value: str | bytes) -> str:
    """NVML strings: older pynvml releases return bytes, newer ones str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _safe(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None if it raises: a manifest with a hole beats a run that never starts."""
    try:
        return fn()
    except Exception:
        return None


def describe_hardware() -> dict[str, Any]:
    """A JSON-serialisable description of this machine for a run manifest; never raises.

    ``gpus`` lists every GPU of the node; ``visible_gpus`` the NVML indices this process may use,
    in CUDA's order, of which an engine with tensor parallelism ``tp`` uses the first ``tp``.
    """
    return {
        "hostname": _safe(platform.node),
        "platform": _safe(platform.platform),
        "machine": _safe(platform.machine),
        "python": _safe(platform.python_version),
        "cpu_model": _safe(_cpu_model),
        "cpu_logical_cores": _safe(lambda: psutil.cpu_count(logical=True)),
        "cpu_physical_cores": _safe(lambda: psutil.cpu_count(logical=False)),
        "memory_gib": _safe(lambda: psutil.virtual_memory().total / GIB),
        **_gpus(),
    }


def telemetry_source() -> str:
    """Which telemetry a :class:`TelemetrySampler` started now would record, for the manifest."""
    opened = _nvml_open()
    if opened is None:
        return "cpu (psutil)"
    _nvml_close(opened[0])
    return "nvidia (pynvml)"
