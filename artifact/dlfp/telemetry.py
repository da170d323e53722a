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
"""

from __future__ import annotations

import contextlib
import importlib
import platform
import threading
import time
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

import pandas as pd
import psutil

GIB = float(2**30)
MAX_INTERVAL_S = 60.0
COLUMNS = ("t_s", "source", "metric", "value")

# (source, metric, probe); a probe returns None when its value is unavailable this time.
Probe = tuple[str, str, Callable[[], float | None]]


def _nvml_open() -> tuple[ModuleType, list[Any]] | None:
    """``(pynvml, device handles)`` with NVML initialised, or None where GPU sampling is off.

    The caller owns the initialisation and must call ``nvmlShutdown``. Any failure (package
    missing, no driver, no devices) means "no GPU telemetry", not an error.
    """
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:
        handles = []
    if not handles:
        _nvml_close(nvml)
        return None
    return nvml, handles


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
    """

    def __init__(self, interval_s: float = 0.5, t0_monotonic: float | None = None) -> None:
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

    def __enter__(self) -> TelemetrySampler:
        if self._thread is not None:
            raise RuntimeError("TelemetrySampler is single-use; create a new one per arm")
        self._probes = _cpu_probes()
        opened = _nvml_open()
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


def _gpus() -> list[dict[str, Any]]:
    """Name, memory and driver of each NVIDIA GPU; [] when NVML is unavailable or misbehaves."""
    opened = _nvml_open()
    if opened is None:
        return []
    nvml, handles = opened
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        return [{"name": _text(nvml.nvmlDeviceGetName(h)),
                 "memory_gib": nvml.nvmlDeviceGetMemoryInfo(h).total / GIB,
                 "driver": driver} for h in handles]
    except Exception:
        return []
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
    """A JSON-serialisable description of this machine for a run manifest; never raises."""
    return {
        "hostname": _safe(platform.node),
        "platform": _safe(platform.platform),
        "machine": _safe(platform.machine),
        "python": _safe(platform.python_version),
        "cpu_model": _safe(_cpu_model),
        "cpu_logical_cores": _safe(lambda: psutil.cpu_count(logical=True)),
        "cpu_physical_cores": _safe(lambda: psutil.cpu_count(logical=False)),
        "memory_gib": _safe(lambda: psutil.virtual_memory().total / GIB),
        "gpus": _gpus(),
    }


def telemetry_source() -> str:
    """Which telemetry a :class:`TelemetrySampler` started now would record, for the manifest."""
    opened = _nvml_open()
    if opened is None:
        return "cpu (psutil)"
    _nvml_close(opened[0])
    return "nvidia (pynvml)"
