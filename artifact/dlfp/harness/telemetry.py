"""Hardware telemetry sampled in the background while a trial arm runs.

Latency differences between arms are only credible if the hardware behaved the same in
both: a throttled clock or a neighbour's load shows up here rather than being silently
blamed on the scheduler. Samples are stamped with ``time.monotonic()`` relative to the
trial's ``t0`` (the clock the client trace and the engine step records use), so they line
up with both on one time axis.

CPU metrics come from psutil and are always present. NVIDIA GPU metrics come from NVML
(``nvidia-ml-py``, imported as ``pynvml``) when it imports, initialises and sees at least
one device. Telemetry is a side channel: a failing probe records nothing for that metric
and sampling carries on; it must never end a trial. Why NVML gave nothing is recorded
(``hardware.nvml_error``), so a CUDA run without GPU samples is not mistaken for a CPU run.

Which GPUs. NVML lists every GPU of the node whatever ``CUDA_VISIBLE_DEVICES`` says, so "the
first NVML device" may be one the engine never touched. An engine with tensor parallelism
``tp`` runs on CUDA devices ``0 .. tp-1``, the first ``tp`` entries of ``CUDA_VISIBLE_DEVICES``
(indices, ``GPU-`` UUIDs or a ``MIG-`` device), which :mod:`dlfp.harness.devices` reads as CUDA does,
indices in PCI bus order (every engine dlfp starts gets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless the
user set another order, :mod:`dlfp.harness.engine`). A MIG device is sampled through its own NVML
handle where NVML gives one (memory, utilisation and clock where the driver allows; never its GPU's
power, shared with the other slices), else recorded as not sampled. The sampler records engine
device ``k`` as source ``gpu<k>`` (the engine's ``cuda:<k>``), and :func:`describe_hardware` records
the node's GPUs (NVML index, UUID), the raw ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``, the
visible NVML indices in CUDA order and what each entry named, so a manifest says which GPUs a run
used (:func:`dlfp.analysis.labels.measured_on`).
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
from typing import Any, TypeVar

import pandas as pd
import psutil

from dlfp.harness.devices import PCI_BUS_ID, Mig, Visible, cuda_devices, map_visible

GIB = float(2**30)
MAX_INTERVAL_S = 60.0
COLUMNS = ("t_s", "source", "metric", "value")
MIG_API = ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex")

# (source, metric, probe); a probe returns None when its value is unavailable this time.
Probe = tuple[str, str, Callable[[], float | None]]
T = TypeVar("T")


def _why(exc: BaseException) -> str:
    """An NVML failure in words (pynvml's errors often have an empty message)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _nvml_init() -> tuple[ModuleType | None, str | None]:
    """``(pynvml initialised, None)``, or ``(None, why not)``; the caller must call :func:`_nvml_close`."""
    try:
        nvml = importlib.import_module("pynvml")
    except Exception:
        return None, "pynvml (nvidia-ml-py) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return None, f"nvmlInit failed ({_why(exc)})"
    return nvml, None


def _nvml_close(nvml: ModuleType) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _uuids(nvml: ModuleType) -> list[str | None]:
    """Every NVML device's UUID by NVML index (None where the driver will not say)."""
    return [_safe(lambda i: _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))), i)
            for i in range(int(nvml.nvmlDeviceGetCount()))]


def _migs(nvml: ModuleType, count: int, entries: Sequence[str]) -> list[Mig] | None:
    """The MIG devices of every GPU in MIG mode ([] where none is); None where this NVML cannot list
    them. Without NVML's listing calls, each ``MIG-`` entry is looked up by UUID and mapped to its GPU."""
    if all(hasattr(nvml, f) for f in MIG_API):
        with contextlib.suppress(Exception):
            return [m for i in range(count) for m in _slots(nvml, i)]
    try:
        found = []
        for entry in (e for e in entries if e.startswith("MIG-")):
            parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvml.nvmlDeviceGetHandleByUUID(entry))
            found.append(Mig(int(nvml.nvmlDeviceGetIndex(parent)), None, entry))
        return found
    except Exception:
        return None


def _slots(nvml: ModuleType, gpu: int) -> list[Mig]:
    h = nvml.nvmlDeviceGetHandleByIndex(gpu)
    if not _safe(lambda: nvml.nvmlDeviceGetMigMode(h)[0]):  # MIG off, or a GPU without MIG (NOT_SUPPORTED)
        return []
    out = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
        m = _safe(lambda slot: nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot), slot)  # NOT_FOUND: an empty slot
        if m is not None:
            out.append(Mig(gpu, slot, _safe(lambda m: _text(nvml.nvmlDeviceGetUUID(m)), m),
                           _safe(lambda m: int(nvml.nvmlDeviceGetGpuInstanceId(m)), m),
                           _safe(lambda m: int(nvml.nvmlDeviceGetComputeInstanceId(m)), m)))
    return out


def _records(nvml: ModuleType) -> tuple[list[str | None], list[Visible]]:
    """Every NVML GPU's UUID and this process's :func:`map_visible` records, from the environment."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    uuids = _uuids(nvml)
    entries = [e.strip() for e in env.split(",")] if env is not None else []
    migs = _migs(nvml, len(uuids), entries) if any(e.startswith("MIG-") for e in entries) else []
    return uuids, map_visible(env, uuids, migs, os.environ.get("CUDA_DEVICE_ORDER"))


def _handle(nvml: ModuleType, target: int | Visible | None) -> Any:
    """The NVML handle telemetry reads for a device: a GPU by NVML index, a MIG device by slot or UUID."""
    if isinstance(target, int):
        return nvml.nvmlDeviceGetHandleByIndex(target)
    if target is None or not target.sampled or target.index is None:
        return None
    if target.mig is None:
        return nvml.nvmlDeviceGetHandleByIndex(target.index)
    if target.mig.slot is not None:
        return nvml.nvmlDeviceGetMigDeviceHandleByIndex(nvml.nvmlDeviceGetHandleByIndex(target.index), target.mig.slot)
    return nvml.nvmlDeviceGetHandleByUUID(target.mig.uuid)


def _with_nvml(read: Callable[[ModuleType], T], default: T) -> T:
    """``read(pynvml)`` with NVML initialised and shut down again; ``default`` without NVML or if it raises."""
    nvml, _ = _nvml_init()
    if nvml is None:
        return default
    try:
        return read(nvml)
    except Exception:
        return default
    finally:
        _nvml_close(nvml)


def engine_gpus(tensor_parallel_size: int) -> list[Visible]:
    """The devices an engine with this TP size starts on from this process: the first
    ``tensor_parallel_size`` CUDA devices ([] without NVML), for :class:`TelemetrySampler`."""
    return _with_nvml(lambda nvml: cuda_devices(_records(nvml)[1])[:tensor_parallel_size], [])


def gpu_memory(tensor_parallel_size: int) -> list[tuple[str, float, float]]:
    """``(device, free GiB, total GiB)`` of each device an engine with this TP size will use, where
    NVML can say ([] without NVML): what vLLM checks ``gpu_memory_utilization`` against at start-up."""
    def read(nvml: ModuleType) -> list[tuple[str, float, float]]:
        out = []
        for k, v in enumerate(cuda_devices(_records(nvml)[1])[:tensor_parallel_size]):
            info = _safe(lambda v: nvml.nvmlDeviceGetMemoryInfo(_handle(nvml, v)), v)
            mig = f", MIG device {v.mig.uuid}" if v.mig else ""
            if info is not None:
                out.append((f"cuda:{k} (NVML GPU {v.index}{mig})", info.free / GIB, info.total / GIB))
        return out

    return _with_nvml(read, [])


def _cpu_freq_mhz() -> float | None:
    freq = psutil.cpu_freq()  # None (or absent fields) on platforms that do not expose it
    return None if freq is None else float(freq.current)


def _cpu_probes() -> list[Probe]:
    return [
        ("cpu", "util_pct", lambda: float(psutil.cpu_percent(interval=None))),
        ("cpu", "freq_mhz", _cpu_freq_mhz),
        ("cpu", "mem_used_gib", lambda: psutil.virtual_memory().used / GIB),
    ]


def _gpu_probes(nvml: ModuleType, handles: Sequence[tuple[int, Any, bool]]) -> list[Probe]:
    """Probes of ``(k, handle, mig)``: source ``gpu<k>``; a MIG device's power is its GPU's, shared: not read."""
    probes: list[Probe] = []
    for k, h, mig in handles:
        src = f"gpu{k}"
        # Each probe is bound to this device's handle; a plain closure would see the last one.
        probes += [
            (src, "util_pct", _bound(lambda h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu), h)),
            (src, "sm_clock_mhz", _bound(lambda h: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)), h)),
            (src, "mem_used_gib", _bound(lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / GIB, h)),
        ]
        if not mig:
            probes.append((src, "power_w", _bound(lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, h)))
    return probes


def _open(gpus: Sequence[int | Visible | None] | None) -> tuple[ModuleType, list[Any]] | None:
    """``(pynvml, probes' handles)`` with NVML initialised, or None where no GPU is sampled.

    ``gpus``: the devices to sample, in CUDA order (NVML indices or :class:`Visible` records; None:
    one not sampled, keeping the numbering); None: every device visible to this process. The caller
    owns the initialisation and must call :func:`_nvml_close`.
    """
    nvml, _ = _nvml_init()
    if nvml is None:
        return None
    try:
        targets = cuda_devices(_records(nvml)[1]) if gpus is None else list(gpus)
    except Exception:
        targets = []
    handles = []
    for k, target in enumerate(targets):
        h = _safe(lambda t: _handle(nvml, t), target)
        if h is not None:
            handles.append((k, h, isinstance(target, Visible) and target.mig is not None))
    if not handles:
        _nvml_close(nvml)
        return None
    return nvml, handles


class TelemetrySampler:
    """Samples CPU (and NVIDIA GPU) metrics every ``interval_s`` on a daemon thread.

    Use as a context manager around the arm. The first sample is taken one interval after
    entry, because ``util_pct`` is a utilisation *since the previous call* and needs an
    interval behind it; a block shorter than ``interval_s`` therefore records nothing.
    ``gpus``: the engine's devices (:func:`engine_gpus`, or NVML indices), sampled as ``gpu<k>``
    by position; None: every device visible to this process (``CUDA_VISIBLE_DEVICES``), which is
    the engine's when a job is given exactly the GPUs it uses, as SLURM and ``dlfp gpu-check`` do.
    """

    def __init__(self, interval_s: float = 0.5, t0_monotonic: float | None = None,
                 gpus: Sequence[int | Visible | None] | None = None) -> None:
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
        opened = _open(self.gpus)
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


def _device_record(nvml: ModuleType, v: Visible) -> dict[str, Any]:
    """A :class:`Visible` for the manifest; a MIG device named by NVML and checked to be readable."""
    record = {"entry": v.entry, "index": v.index, "mig": None if v.mig is None else v.mig.uuid, "name": None,
              "sampled": v.sampled, "note": v.note}
    if v.mig is not None:
        try:
            h = _handle(nvml, v)
            nvml.nvmlDeviceGetMemoryInfo(h)
            record["name"] = _safe(lambda: _text(nvml.nvmlDeviceGetName(h)))
        except Exception as exc:
            record.update(sampled=False, note=f"not sampled: NVML gives no readable MIG handle ({_why(exc)})")
    return record


def _gpus() -> dict[str, Any]:
    """Every NVIDIA GPU of the node (NVML index, UUID, name, memory, driver), the NVML indices of those
    visible to this process in CUDA's order, each ``CUDA_VISIBLE_DEVICES`` entry's record, the
    ``CUDA_DEVICE_ORDER`` engines run under (dlfp's ``PCI_BUS_ID`` unless the user set another) and why
    NVML gave nothing (``nvml_error``, None when it listed GPUs)."""
    env, order = os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER", PCI_BUS_ID)
    none: dict[str, Any] = {"gpus": [], "cuda_visible_devices": env, "cuda_device_order": order,
                            "visible_gpus": [], "visible_devices": []}
    nvml, error = _nvml_init()
    if nvml is None:
        return {**none, "nvml_error": error}
    try:
        driver = _safe(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        uuids, records = _records(nvml)
        gpus = []
        for i, uuid in enumerate(uuids):
            h = _safe(lambda i: nvml.nvmlDeviceGetHandleByIndex(i), i)
            gpus.append({"index": i, "uuid": uuid, "name": _safe(lambda h: _text(nvml.nvmlDeviceGetName(h)), h),
                         "memory_gib": _safe(lambda h: nvml.nvmlDeviceGetMemoryInfo(h).total / GIB, h),
                         "driver": driver})
        devices = [_device_record(nvml, v) for v in records]
        return {**none, "gpus": gpus, "visible_gpus": [v.index for v in cuda_devices(records)],
                "visible_devices": devices, "nvml_error": None if gpus else "NVML lists no GPU"}
    except Exception as exc:
        return {**none, "nvml_error": f"NVML failed listing GPUs ({_why(exc)})"}
    finally:
        _nvml_close(nvml)


def _text(value: str | bytes) -> str:
    """NVML strings: older pynvml releases return bytes, newer ones str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _safe(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None if it raises: a manifest with a hole beats a run that never starts."""
    try:
        return fn(*args)
    except Exception:
        return None


def _bound(fn: Callable[[Any], float], arg: Any) -> Callable[[], float]:
    """``fn`` with its one argument bound now (a probe read later, in a loop over devices)."""
    return lambda: fn(arg)


def describe_hardware() -> dict[str, Any]:
    """A JSON-serialisable description of this machine for a run manifest; never raises.

    ``gpus`` lists every GPU of the node; ``visible_gpus`` the NVML indices this process may use,
    in CUDA's order, of which an engine with tensor parallelism ``tp`` uses the first ``tp``;
    ``visible_devices`` what each ``CUDA_VISIBLE_DEVICES`` entry named and whether it is sampled;
    ``nvml_error`` why there are no GPU records, if so.
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
    opened = _open(None)
    if opened is None:
        return "cpu (psutil)"
    _nvml_close(opened[0])
    return "nvidia (pynvml)"
