"""What a run was measured (or simulated) on, in the words a book or figure prints.

Derived from the run's manifest alone, never from words written for one machine, so a book built
from a GPU run reads correctly without edits: "2-core Intel Xeon Processor, vLLM 0.32.0+cpu",
"1 x NVIDIA A100-SXM4-80GB, vLLM 0.32.0", or for the modeled accelerator "simulated: cost
profile a100 (NVIDIA A100 80GB SXM4, TP 1, async scheduling, virtual time, engine costs gpu-node), real
vLLM 0.32.0+cpu scheduler" (or "real time": a real engine that sleeps each modeled step).

The GPUs named are the ones the engine used: the first ``tensor_parallel_size`` of the GPUs
visible to the run (``hardware.visible_gpus``, NVML indices in CUDA's order, see
:mod:`dlfp.harness.telemetry`), not the first GPUs of the node; a MIG device by its own name.
Manifests written before that field existed fall back to the node's first GPUs.

The build decides GPU or CPU (:func:`build`), not whether telemetry listed GPUs: a GPU build whose
NVML failed is "GPU (telemetry unavailable: <reason>)", an unknown build "unknown build", never a
CPU run. A GPU claim that :func:`dlfp.analysis.runs.load_run` could not verify (no identity checksum, no
GPU telemetry) reads "unverified device (claims <GPUs>: <why>)". Where the run's units report what
they ran (``units[].ran``, from the engine's step log), the label ends with their scheduling mode:
"..., vLLM 0.32.0, async scheduling".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dlfp.analysis.runs import RunData
from dlfp.trials.arms import REFERENCE
from dlfp.trials.schema import Manifest

_MARKS = re.compile(r"\((R|TM|tm|r)\)")


def measured_on(manifest: Manifest) -> str:
    """The phrase naming what produced a run's numbers (module docstring); pure, never raises
    on a field that is missing or of the wrong kind (it says ``unknown`` instead)."""
    engine = _mapping(manifest.config.get("engine"))
    vllm = _mapping(manifest.versions).get("vllm")
    vllm = vllm if isinstance(vllm, str) and vllm.strip() else "unknown"
    sim = engine.get("sim")
    if sim is not None:
        return _simulated(sim, manifest.sim_profile or {}, vllm)
    return f"{device(manifest)}, vLLM {vllm}{scheduling(manifest)}"


def build(manifest: Manifest) -> str:
    """Which vLLM build produced a run, by ``versions.vllm`` as :func:`dlfp.analysis.runs.gpu_claim`
    reads it: ``"cpu"`` (a ``+cpu`` version), ``"gpu"`` (any other: vLLM's CUDA builds, which bring a
    CUDA torch), ``"unknown"`` (no version recorded), which is never called a GPU or a CPU run."""
    vllm = _mapping(manifest.versions).get("vllm")
    if not isinstance(vllm, str) or vllm.strip() in ("", "unknown"):
        return "unknown"
    return "cpu" if vllm.endswith("+cpu") else "gpu"


def device(manifest: Manifest) -> str:
    """The hardware a measured run's engine ran on: its GPUs, or the CPU (a CPU build on a GPU
    node still ran on the CPU). A GPU build whose manifest names no GPU of the engine (NVML failed)
    still ran on one: "GPU (telemetry unavailable: <reason>)", never the CPU."""
    engine = _mapping(manifest.config.get("engine"))
    tp = engine.get("tensor_parallel_size")
    tp = tp if isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 else 1
    hardware = _mapping(manifest.hardware)
    tp_note = f" (TP {tp})" if tp > 1 else ""
    kind = build(manifest)
    if kind == "unknown":
        return f"unknown build{tp_note}"
    if kind == "gpu":
        gpus = engine_gpus(hardware, tp)
        if not gpus:
            claimed = f"GPU (telemetry unavailable: {telemetry_gap(hardware)}){tp_note}"
        else:
            names = (g.get("name") if isinstance(g.get("name"), str) else "unknown GPU" for g in gpus)
            claimed = f"{_count_names(names)}{tp_note}"
        why = manifest.device_unverified
        return f"unverified device (claims {claimed}: {why})" if isinstance(why, str) and why else claimed
    where = cpu_host(hardware)
    bind = _mapping(manifest.engine_env).get("VLLM_CPU_OMP_THREADS_BIND")
    bound = f" (engine on CPUs {bind})" if isinstance(bind, str) and bind else ""  # one core or two: a speed
    return f"{where}{bound}{tp_note}"


def telemetry_gap(hardware: Mapping[str, Any]) -> str:
    """Why a GPU run's manifest names none of the engine's GPUs, from what telemetry recorded: NVML's
    error (``hardware.nvml_error``), else the first ``CUDA_VISIBLE_DEVICES`` entry it could not place."""
    error = hardware.get("nvml_error")
    if isinstance(error, str) and error:
        return error
    devices = hardware.get("visible_devices")
    devices = [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []
    noted = next((d for d in devices if isinstance(d.get("note"), str) and d["note"]), None)
    if noted is not None:
        return f"CUDA_VISIBLE_DEVICES entry {noted.get('entry')!r} {noted['note']}"
    gpus = hardware.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return "the manifest records no GPU"
    return f"no visible GPU recorded (CUDA_VISIBLE_DEVICES={hardware.get('cuda_visible_devices')!r})"


def scheduling(manifest: Manifest) -> str:
    """", sync scheduling" / ", async scheduling" when every complete unit that reports what it ran
    (``units[].ran``, from the engine's step log) agrees, ", mixed sync/async scheduling" when they
    differ, "" when none reports it (runs recorded before units did)."""
    modes = set()
    for u in manifest.complete_units():
        ran = _mapping(u.ran)
        mode, scheduler = ran.get("async_scheduling"), ran.get("scheduler")
        if isinstance(mode, bool):
            modes.add(mode)
        elif isinstance(scheduler, str) and scheduler:  # the class vLLM chose says it too
            modes.add("Async" in scheduler)
    if not modes:
        return ""
    return ", mixed sync/async scheduling" if len(modes) > 1 else f", {'async' if modes.pop() else 'sync'} scheduling"


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one: a hand-edited manifest reads as unknown."""
    return value if isinstance(value, Mapping) else {}


def engine_gpus(hardware: Mapping[str, Any], tensor_parallel_size: int) -> list[Mapping[str, Any]]:
    """The GPU records (of ``hardware.gpus``) an engine with this TP size ran on; a MIG device's
    record carries the MIG device's name (``hardware.visible_devices``, in the same CUDA order)."""
    gpus = hardware.get("gpus")
    gpus = [g for g in gpus if isinstance(g, Mapping)] if isinstance(gpus, list) else []
    visible = hardware.get("visible_gpus")
    if not isinstance(visible, list):  # an older manifest: the node's first GPUs
        return gpus[:tensor_parallel_size]
    by_index = {g.get("index", i): g for i, g in enumerate(gpus) if isinstance(g.get("index", i), int)}
    used = [by_index[i] for i in visible[:tensor_parallel_size] if isinstance(i, int) and i in by_index]
    devices = hardware.get("visible_devices")
    devices = [d for d in devices if isinstance(d, Mapping)] if isinstance(devices, list) else []
    for k, (gpu, dev) in enumerate(zip(used, devices, strict=False)):
        if dev.get("mig") and dev.get("index") == gpu.get("index"):
            name = dev.get("name")
            used[k] = {**gpu, "name": name if isinstance(name, str) else f"MIG device of {gpu.get('name')}"}
    return used


def cpu_host(hardware: Mapping[str, Any]) -> str:
    """A machine's CPU as a run recorded it (``describe_hardware``): "2-core Intel Xeon Processor", or the
    model alone where the core count is missing or junk."""
    cores = hardware.get("cpu_logical_cores")
    name = cpu_name(hardware.get("cpu_model"))
    return f"{cores}-core {name}" if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else name


def cpu_name(model: Any) -> str:
    """A CPU's marketing name without trademark marks, saying CPU once: "Intel Xeon Processor"."""
    if not isinstance(model, str) or not model.strip():
        return "unknown CPU"
    name = " ".join(_MARKS.sub("", model).split())
    return name if re.search(r"\b(CPU|Processor)\b", name, re.IGNORECASE) else f"{name} CPU"


def _count_names(names: Any) -> str:
    """``["A", "A", "B"]`` -> "2 x A + 1 x B" (order of first appearance)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return " + ".join(f"{n} x {name}" for name, n in counts.items())


def _simulated(sim: Mapping[str, Any], profile: Mapping[str, Any], vllm: str) -> str:
    name = sim.get("profile") or profile.get("name") or "a100"  # dlfp.sim.config's default profile
    device = (profile.get("values") or {}).get("device")
    mode = "async" if sim.get("async_scheduling", True) else "sync"
    # dlfp.sim.config's defaults: runs recorded before the keys existed ran in real time (gpu-node is the engine's)
    clock = f"virtual time, engine costs {sim.get('engine', 'gpu-node')}" if sim.get("clock") == "virtual" \
        else "real time"
    inside = ", ".join(p for p in (device, f"TP {sim.get('tp', 1)}", f"{mode} scheduling", clock) if p)
    return f"simulated: cost profile {name} ({inside}), real vLLM {vllm} scheduler"


def scope_note(run: RunData) -> str:
    """What kind of evidence a run is, for prose beside its numbers, from its manifest alone."""
    engine = run.config.engine
    if engine.sim is not None:
        return "simulated numbers (a real vLLM scheduler on a modeled accelerator): evidence about the mechanism, " \
               "never a GPU measurement"
    kind = build(run.manifest)
    if kind == "gpu":
        return (f"GPU measurements of {engine.model} ({engine.dtype}): comparable with the "
                "paper's numbers where model, precision and GPU match its setting")
    if kind == "unknown":
        return (f"measurements of {engine.model} ({engine.dtype}) by an unknown vLLM build: the manifest does not "
                "say whether they ran on a GPU or the CPU, so they are not comparable with the paper's numbers")
    return (f"CPU measurements of the weightless {engine.model} ({engine.dtype}): they test "
            "the mechanism, not the paper's GPU numbers")


def stock_budget(run: RunData) -> int:
    """Stock's token budget (``max_num_batched_tokens``): the size of the win depends on it."""
    return run.config.engine_for(REFERENCE).max_num_batched_tokens


LATE_SEND_MS = 10.0
"""A unit whose client sent its requests later than this (p99) had its arrival process disturbed,
typically by another process on the machine; the runner records it per unit."""


def lateness_note(run: RunData) -> str:
    """Which units' requests were sent late (p99 above :data:`LATE_SEND_MS`), from the manifest."""
    late = []
    for u in run.manifest.units:
        p99 = (u.send_lateness_ms or {}).get("p99")
        if isinstance(p99, (int, float)) and not isinstance(p99, bool) and p99 > LATE_SEND_MS:
            late.append(f"{u.label} {p99:.0f} ms")
    return (f"late sends (p99 over {LATE_SEND_MS:.0f} ms): {', '.join(late)}" if late
            else f"every unit sent its requests within {LATE_SEND_MS:.0f} ms of schedule (p99)")


def source_line(run: RunData) -> str:
    """Where a run's numbers come from: measured (machine, vLLM build) or simulated (profile)."""
    label = measured_on(run.manifest)
    return label if label.startswith("simulated") else f"measured: {label}"


def source_kind(source: str) -> str:
    """"measured" or "simulated", from a :func:`source_line`, for a panel's title or a list of
    targets; the whole source line belongs in the caption."""
    return "simulated" if source.startswith("simulated") else "measured"
