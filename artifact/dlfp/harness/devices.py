"""What ``CUDA_VISIBLE_DEVICES`` names, read as CUDA reads it: one record per entry, pure.

NVML numbers a node's GPUs in PCI bus order and lists MIG devices under their parent GPU; CUDA
numbers what ``CUDA_VISIBLE_DEVICES`` leaves visible ``cuda:0, cuda:1, ...`` (in PCI bus order too
under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, which every engine dlfp starts gets). :func:`map_visible`
turns the variable and NVML's inventory (UUIDs by index, MIG devices) into :class:`Visible`
records, each naming its GPU or saying why not, so telemetry samples the engine's devices and a
manifest says which ones they were. Apart from NVML (:mod:`dlfp.harness.telemetry` is the glue)
so that the parser can be tested on any string: it never raises.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

PCI_BUS_ID = "PCI_BUS_ID"
"""The ``CUDA_DEVICE_ORDER`` under which CUDA numbers GPUs as NVML does."""


@dataclass(frozen=True)
class Mig:
    """A MIG device NVML lists: parent GPU (NVML index), slot (``nvmlDeviceGetMigDeviceHandleByIndex``;
    None when found by UUID), UUID, GPU and compute instance ids (the old ``MIG-GPU-<uuid>/<gi>/<ci>`` name)."""

    gpu: int
    slot: int | None
    uuid: str | None
    gi: int | None = None
    ci: int | None = None


@dataclass(frozen=True)
class Visible:
    """One ``CUDA_VISIBLE_DEVICES`` entry as CUDA reads it.

    ``index``: NVML index of the GPU it names (a MIG device's parent), None when it names no device
    CUDA uses or one NVML cannot place; ``note`` then says why. ``sampled``: telemetry reads it.
    ``note`` beside an index is a caveat or why it is not sampled.
    """

    entry: str
    index: int | None = None
    mig: Mig | None = None
    sampled: bool = False
    note: str | None = None


def _unique(prefix: str, names: Sequence[str | None]) -> int | str:
    """The position of the one name ``prefix`` starts (CUDA accepts a unique UUID prefix), or why not."""
    hits = [i for i, n in enumerate(names) if isinstance(n, str) and n.startswith(prefix)]
    if len(hits) == 1:
        return hits[0]
    return f"ambiguous: {len(hits)} UUIDs NVML lists start so" if hits else "matches no UUID NVML lists"


def _resolve(entry: str, uuids: Sequence[str | None], migs: Sequence[Mig] | None) -> tuple[int, Mig | None] | str:
    """``(NVML index, MIG device)`` an entry names, or why it names none."""
    if re.fullmatch(r"[0-9]{1,18}", entry):
        return (int(entry), None) if int(entry) < len(uuids) else f"no GPU {entry} ({len(uuids)} listed)"
    if entry.startswith("GPU-"):
        hit = _unique(entry, uuids)
        return (hit, None) if isinstance(hit, int) else hit
    if not entry.startswith("MIG-"):
        return "not a GPU index or UUID"
    migs = migs or ()
    old = re.fullmatch(r"MIG-(GPU-[^/]+)/([0-9]+)/([0-9]+)", entry)
    if old:  # drivers before R470 name a MIG device by its GPU's UUID and instance ids
        parent = _unique(old.group(1), uuids)
        found = [m for m in migs if (m.gpu, m.gi, m.ci) == (parent, int(old.group(2)), int(old.group(3)))]
        return (found[0].gpu, found[0]) if found else "no such MIG device"
    hit = _unique(entry, [m.uuid for m in migs])
    return (migs[hit].gpu, migs[hit]) if isinstance(hit, int) else hit


def map_visible(cuda_visible_devices: str | None, uuids: Sequence[str | None], migs: Sequence[Mig] | None = (),
                order: str | None = None) -> list[Visible]:
    """One :class:`Visible` per ``CUDA_VISIBLE_DEVICES`` entry (per NVML GPU when unset); never raises.

    As CUDA does, the devices end at the first entry that names none (``-1``, an index out of range,
    an unknown or ambiguous UUID prefix, a repeat); the entries after it are recorded as not
    visible. A second MIG device is not visible either (CUDA enumerates one per process), and the
    entries after it are not sampled. ``migs``: the MIG devices NVML lists, None where it cannot
    list them: a MIG entry is then recorded as not placed, not sampled, and it ends the devices
    too, since CUDA numbers it and the entries after it could not be lined up with the engine's
    ``cuda:<k>``. ``order``: ``CUDA_DEVICE_ORDER`` (None: dlfp's ``PCI_BUS_ID``); an index read under
    another order on a node of several GPUs carries a note saying so.
    """
    entries = [str(i) for i in range(len(uuids))] if cuda_visible_devices is None else \
        [e.strip() for e in cuda_visible_devices.split(",")]
    caveat = None if order in (None, PCI_BUS_ID) or len(uuids) < 2 else \
        f"index read in PCI bus order (NVML's); CUDA_DEVICE_ORDER={order} may number GPUs otherwise"
    out: list[Visible] = []
    seen: set[tuple[int, Mig | None]] = set()
    after: str | None = None
    for entry in entries:
        if after is not None:
            out.append(Visible(entry, note=after))
            continue
        got = _resolve(entry, uuids, migs)
        if isinstance(got, str) and entry.startswith("MIG-") and migs is None:
            out.append(Visible(entry, note="not sampled: NVML cannot list MIG devices here, so its GPU is unknown"))
            after = f"not sampled: it follows {entry!r}, which NVML cannot place"
            continue
        if isinstance(got, str) or got in seen:
            why = got if isinstance(got, str) else "a repeat"
            out.append(Visible(entry, note=f"not visible: {why}; CUDA stops here"))
            after = f"not visible: CUDA stops at {entry!r}"
        elif got[1] is not None and any(m is not None for _, m in seen):
            out.append(Visible(entry, note="not visible: a second MIG device (CUDA enumerates one per process)"))
            after = f"not sampled: it follows {entry!r}, past which CUDA's numbering is not known here"
        else:
            seen.add(got)
            index_entry = got[1] is None and not entry.startswith("GPU-")
            out.append(Visible(entry, got[0], got[1], sampled=True, note=caveat if index_entry else None))
    return out


def cuda_devices(records: Sequence[Visible]) -> list[Visible]:
    """The devices CUDA numbers ``cuda:0, cuda:1, ...``: the records up to the first without a GPU."""
    return list(itertools.takewhile(lambda v: v.index is not None, records))


def visible_gpus(cuda_visible_devices: str | None, uuids: Sequence[str | None], migs: Sequence[Mig] | None = (),
                 order: str | None = None) -> list[int]:
    """NVML indices of the GPUs CUDA shows a process, in CUDA's order (a MIG device: its parent GPU);
    ``uuids``: every NVML device's UUID by NVML index (:func:`map_visible`)."""
    return [v.index for v in cuda_devices(map_visible(cuda_visible_devices, uuids, migs, order)) if v.index is not None]
