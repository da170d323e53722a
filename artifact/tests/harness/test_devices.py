"""``CUDA_VISIBLE_DEVICES`` read as CUDA reads it, against NVML inventories given as plain lists.

The node has four GPUs; GPU 1 is in MIG mode with two MIG devices. Every entry gets one record
that names its GPU or says why not, whatever the string (hypothesis).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.harness.devices import Mig, cuda_devices, map_visible, visible_gpus

UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-dddd-3"]
MIGS = [Mig(1, 0, "MIG-1111-aaaa", gi=1, ci=0), Mig(1, 2, "MIG-2222-bbbb", gi=2, ci=0)]


@pytest.mark.parametrize(("env", "want"), [
    (None, [0, 1, 2, 3]),
    ("2,0", [2, 0]),
    ("GPU-cccc,1", [2, 1]),        # a unique UUID prefix, as CUDA accepts
    (" 3 , 1 ", [3, 1]),
    ("1,7,2", [1]),                # CUDA stops at the first entry naming no device
    ("GPU-,3", []),                # an ambiguous prefix names no device
    ("3,3", [3]),
    ("-1", []),
    ("", []),
    ("²", []),                     # a digit to str.isdigit, no index to CUDA
    ("MIG-1234,0", []),            # a MIG device NVML does not list names no device
    ("MIG-1111,0", [1, 0]),        # a MIG device: its parent GPU, by unique UUID prefix
    ("MIG-GPU-bbbb-1/2/0", [1]),   # the pre-R470 name: parent GPU UUID, GPU and compute instance
    ("MIG-GPU-bbbb-1/3/0", []),
    ("MIG-1111,MIG-2222,0", [1]),  # CUDA enumerates one MIG device per process
])
def test_visible_gpus_follow_cuda_visible_devices(env: str | None, want: list[int]) -> None:
    assert visible_gpus(env, UUIDS, MIGS) == want


def test_a_mig_entry_names_its_device_and_parent() -> None:
    [mig, gpu] = map_visible("MIG-2222-bbbb,0", UUIDS, MIGS)
    assert (mig.index, mig.mig, mig.sampled, mig.note) == (1, MIGS[1], True, None)
    assert (gpu.index, gpu.mig, gpu.sampled) == (0, None, True)
    second = map_visible("MIG-1111,MIG-2222,3", UUIDS, MIGS)
    assert [v.index for v in second] == [1, None, None]
    assert "one per process" in second[1].note and second[2].note.startswith("not sampled")


def test_a_mig_entry_nvml_cannot_place_is_stated_not_dropped() -> None:
    """NVML without MIG calls (``migs`` None): the entry is recorded, not sampled, and the ones after it
    cannot be lined up with the engine's devices; it is never read as "no such device"."""
    records = map_visible("MIG-1111,0", UUIDS, None)
    assert [(v.entry, v.index, v.sampled) for v in records] == [("MIG-1111", None, False), ("0", None, False)]
    assert "NVML cannot list MIG devices" in records[0].note and "MIG-1111" in records[1].note
    assert cuda_devices(records) == []
    assert visible_gpus("2,1", UUIDS, None) == [2, 1]  # no MIG entry: nothing to place


def test_stopped_entries_say_where_cuda_stopped() -> None:
    records = map_visible("1,7,2", UUIDS)
    assert [v.index for v in records] == [1, None, None]
    assert records[1].note == "not visible: no GPU 7 (4 listed); CUDA stops here"
    assert records[2].note == "not visible: CUDA stops at '7'"


def test_an_index_under_another_device_order_says_so() -> None:
    """CUDA's FASTEST_FIRST numbers GPUs otherwise than NVML: an index entry keeps NVML's reading (the
    one dlfp's PCI_BUS_ID makes true) and says it; a UUID names one GPU whatever the order."""
    records = map_visible("1,GPU-dddd", UUIDS, order="FASTEST_FIRST")
    assert [v.index for v in records] == [1, 3] and all(v.sampled for v in records)
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST" in records[0].note and records[1].note is None
    assert all(v.note is None for v in map_visible("1,0", UUIDS, order="PCI_BUS_ID"))
    assert map_visible("0", UUIDS[:1], order="FASTEST_FIRST")[0].note is None  # one GPU: one order


ENTRIES = st.one_of(st.text(max_size=12), st.sampled_from(["0", "3", "9", "-1", "GPU-", "GPU-bbbb", "MIG-",
                                                           "MIG-1111", "MIG-GPU-bbbb-1/1/0", " 2", "", "01"]))
UUID_LISTS = st.lists(st.one_of(st.none(), st.sampled_from(UUIDS), st.text(max_size=8)), max_size=5)
MIG_LISTS = st.one_of(st.none(), st.lists(st.builds(
    Mig, st.integers(0, 5), st.one_of(st.none(), st.integers(0, 7)),
    st.one_of(st.none(), st.sampled_from(["MIG-1111-aaaa", "MIG-2222-bbbb"]), st.text(max_size=8)),
    st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.integers(0, 3))), max_size=3))


@settings(max_examples=300, deadline=None)
@given(entries=st.one_of(st.none(), st.lists(ENTRIES, min_size=1, max_size=6)), uuids=UUID_LISTS,
       migs=MIG_LISTS, order=st.sampled_from([None, "PCI_BUS_ID", "FASTEST_FIRST", ""]))
def test_every_entry_gets_one_record_with_a_gpu_or_a_reason(entries: list[str] | None, uuids: list[str | None],
                                                            migs: list[Mig] | None, order: str | None) -> None:
    env = None if entries is None else ",".join(entries)
    records = map_visible(env, uuids, migs, order)
    listed = [str(i) for i in range(len(uuids))] if env is None else [e.strip() for e in env.split(",")]
    assert [v.entry for v in records] == listed
    for v in records:
        assert v.index is not None or (v.note and not v.sampled)
        assert v.index is None or 0 <= v.index < len(uuids) or (v.mig is not None and v.index == v.mig.gpu)
    devices = cuda_devices(records)
    assert visible_gpus(env, uuids, migs, order) == [v.index for v in devices]
    assert len({(v.index, v.mig) for v in devices}) == len(devices)  # CUDA refuses a repeat
    assert sum(v.mig is not None for v in devices) <= 1
    assert all(v.index is None for v in records[len(devices):])  # after the first gap, no device
