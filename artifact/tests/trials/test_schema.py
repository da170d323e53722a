"""A run's manifest (:mod:`dlfp.trials.schema`): readers verify before they trust. A missing, corrupt, foreign,
edited or later-schema manifest is refused with a :class:`RunFolderError` naming the file; an unfinished run
is read only on request; every committed run reads, whatever schema it was written in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dlfp.paths import REPO_ROOT, sha256
from dlfp.trials.runfolder import (
    KIND,
    MANIFEST,
    PREFLIGHT_STEPS,
    SCHEMAS,
    TABLES,
    RunFolderError,
    read_table,
    verify_file,
)
from dlfp.trials.schema import SCHEMA, Manifest, Unit, check_status, listed_files, read_manifest, write_manifest
from tests.trials.test_runfolder import COMMITTED, make_run

COMMITTED_MANIFESTS = sorted((REPO_ROOT / "data").rglob(MANIFEST))


def edit_manifest(run: Path, **fields: Any) -> None:
    manifest = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    manifest.update(fields)
    (run / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """A private copy of a committed run, to damage."""
    return Path(shutil.copytree(COMMITTED, tmp_path / "cpu-default"))


# --- the committed run reads back verified ----------------------------------------------------------


def test_committed_run_is_vouched_for_file_by_file(committed: Path) -> None:
    manifest = read_manifest(committed)
    check_status(committed, manifest, allow_partial=False)
    files = listed_files(committed, manifest)
    n_units = len(manifest.complete_units())
    assert n_units == len(manifest.units) > 0
    assert len(files) == n_units * len(TABLES) + len(manifest.workloads or {}) + 1  # + the pre-flight's steps
    assert (committed / PREFLIGHT_STEPS, (manifest.design or {})["files"][PREFLIGHT_STEPS]) in files
    for path, digest in files:
        verify_file(path, digest)
    for u in manifest.complete_units():
        for table in TABLES:
            name = f"{table}.parquet"
            df = read_table(committed / u.label / name, table, u.files[name])
            assert set(SCHEMAS[table]) <= set(df.columns) and len(df) > 0


def test_a_changed_byte_in_a_committed_table_is_refused_by_name(committed: Path) -> None:
    manifest = read_manifest(committed)
    path, digest = next((p, d) for p, d in listed_files(committed, manifest) if p.name == "tokens.parquet")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RunFolderError, match="does not match its checksum") as err:
        verify_file(path, digest)
    assert str(path) in str(err.value) and digest[:12] in str(err.value)


def test_a_truncated_committed_manifest_is_corrupt(committed: Path) -> None:
    text = (committed / MANIFEST).read_text(encoding="utf-8")
    (committed / MANIFEST).write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(RunFolderError, match="is corrupt") as err:
        read_manifest(committed)
    assert str(committed / MANIFEST) in str(err.value)


# --- read_manifest -----------------------------------------------------------------------------------


def test_a_valid_tiny_manifest_is_returned_as_written(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2)
    manifest = read_manifest(run)
    assert manifest.to_json() == {**json.loads((run / MANIFEST).read_text(encoding="utf-8")), "schema": SCHEMA}
    assert manifest.schema == 1  # written without the field: the schema before it
    assert [(u.trial, u.arm) for u in manifest.units] == [(0, "stock"), (0, "dlfp"), (1, "stock"),
                                                                   (1, "dlfp")]


def test_a_folder_without_manifest_is_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError) as err:
        read_manifest(tmp_path)
    assert str(err.value) == f"{tmp_path} is not a run folder: it has no {MANIFEST}"
    (tmp_path / MANIFEST).mkdir()  # a folder of that name is no manifest either
    with pytest.raises(RunFolderError, match="is not a run folder"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("content", [b"{", b"", b"\xff\xfe{}", b'{"kind": "dlfp-paired-trials",'])
def test_corrupt_manifest_is_refused_naming_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / MANIFEST).write_bytes(content)
    with pytest.raises(RunFolderError) as err:
        read_manifest(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / MANIFEST} is corrupt (")
    assert "restore it from version control" in str(err.value)


@pytest.mark.parametrize(("doc", "kind"), [
    ({"kind": "something-else", "units": [], "config": {}, "status": "complete"}, "'something-else'"),
    ({"units": [], "config": {}, "status": "complete"}, "None"),
    ([1, 2], "'list'"),
    ("dlfp-paired-trials", "'str'"),
])
def test_foreign_manifest_is_refused_with_its_kind(tmp_path: Path, doc: Any, kind: str) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RunFolderError) as err:
        read_manifest(tmp_path)
    assert str(err.value) == (f"{tmp_path / MANIFEST} is not a dlfp paired-trial manifest (kind {kind}, "
                              f"expected {KIND!r})")


@pytest.mark.parametrize(("fields", "needle"), [
    ({"units": None}, "field 'units' is missing or not a list"),
    ({"config": []}, "field 'config' is missing or not a dict"),
    ({"status": 1}, "field 'status' is missing or not a str"),
    ({"argv": "dlfp trial"}, "field 'argv' is 'dlfp trial', not a list"),
    ({"workloads": {"trial-0/workload.parquet": 5}}, "field 'workloads' holds a checksum that is not a string"),
    ({"design": {"rules": {"stall_share": "lots"}}}, "field 'design.rules' is invalid"),
    ({"design": {"overrides": None}}, "field 'design.overrides' is None, not a dict"),
    ({"design": {"files": {PREFLIGHT_STEPS: None}}}, "field 'design.files' holds a checksum"),
])
def test_edited_fields_are_refused_by_name(tmp_path: Path, fields: dict[str, Any], needle: str) -> None:
    run = make_run(tmp_path)
    edit_manifest(run, **fields)
    with pytest.raises(RunFolderError) as err:
        read_manifest(run)
    assert str(err.value).startswith(f"{run / MANIFEST}: ") and needle in str(err.value)


@pytest.mark.parametrize("unit", [
    {"trial": 0, "arm": "../stock", "status": "complete", "files": {}},  # would read outside the folder
    {"trial": -1, "arm": "stock", "status": "complete", "files": {}},
    {"trial": True, "arm": "stock", "status": "complete", "files": {}},
    {"trial": 0, "arm": "stock", "files": {}},
    {"trial": 0, "arm": "stock", "status": "complete", "files": {"requests.parquet": 1}},
    "trial-0/stock",
])
def test_malformed_unit_is_refused_by_index(tmp_path: Path, unit: Any) -> None:
    run = make_run(tmp_path)
    units = json.loads((run / MANIFEST).read_text(encoding="utf-8"))["units"]
    edit_manifest(run, units=[units[0], unit])
    with pytest.raises(RunFolderError, match=r"field 'units\[1\]' is .*, not a \{trial, arm, status, files\} record"):
        read_manifest(run)


def test_lost_or_doubled_units_are_refused(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2)
    units = json.loads((run / MANIFEST).read_text(encoding="utf-8"))["units"]
    edit_manifest(run, units=units[:3])  # trial 1's dlfp arm lost
    with pytest.raises(RunFolderError, match=r"field 'units' lists .* not each arm of each of the config's 2 trials"):
        read_manifest(run)
    edit_manifest(run, units=[*units, units[0]])  # a unit doubled
    with pytest.raises(RunFolderError, match="field 'units'"):
        read_manifest(run)


@pytest.mark.parametrize("name", [[], {"a": 1}, 3, None])
def test_an_arm_name_edited_to_a_non_text_is_read_from_the_units(tmp_path: Path, name: Any) -> None:
    """A fuzz find: a config arm's name edited to a list made the plan check raise TypeError (unhashable)
    instead of the file's error. The units then say which arms ran, and the manifest reads as before."""
    run = make_run(tmp_path, trials=2)
    config = json.loads((run / MANIFEST).read_text(encoding="utf-8"))["config"]
    config["arms"] = [{"name": name}, {"name": "dlfp", "dlfp": {}}]
    edit_manifest(run, config=config)
    assert {u.arm for u in read_manifest(run).units} == {"stock", "dlfp"}


# --- check_status, complete_units -----------------------------------------------------------------


def test_complete_units_are_the_finished_ones(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2, incomplete=((1, "dlfp"),))
    manifest = read_manifest(run)
    assert [(u.trial, u.arm) for u in manifest.complete_units()] == [(0, "stock"), (0, "dlfp"), (1, "stock")]


def test_unfinished_run_is_refused_unless_partial_is_asked_for(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2, incomplete=((1, "dlfp"),))
    manifest = read_manifest(run)
    with pytest.raises(RunFolderError) as err:
        check_status(run, manifest, allow_partial=False)
    msg = str(err.value)
    assert msg.startswith(f"{run} is a interrupted run (missing: trial-1/dlfp); rerun the command")
    assert "manifest argv: dlfp trial x.yaml" in msg and "allow_partial=True" in msg
    check_status(run, manifest, allow_partial=True)  # read on purpose: no refusal


def test_the_manifests_own_missing_list_is_reported(tmp_path: Path) -> None:
    run = make_run(tmp_path, incomplete=((0, "dlfp"),))
    edit_manifest(run, missing=["trial-0/dlfp (engine died)"], argv=None)
    with pytest.raises(RunFolderError, match=r"missing: trial-0/dlfp \(engine died\)\).*manifest argv: unknown"):
        check_status(run, read_manifest(run), allow_partial=False)


def test_complete_status_with_unfinished_units_is_an_edit(tmp_path: Path) -> None:
    run = make_run(tmp_path, incomplete=((0, "dlfp"),))
    edit_manifest(run, status="complete")
    manifest = read_manifest(run)
    for partial in (False, True):  # not even on request: the manifest contradicts itself
        with pytest.raises(RunFolderError, match="field 'status' says complete, but some of its units do not"):
            check_status(run, manifest, allow_partial=partial)


# --- verify_file, listed_files ---------------------------------------------------------------------


def test_verify_file_accepts_the_recorded_digest_only(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"some bytes")
    verify_file(path, sha256(path))
    with pytest.raises(RunFolderError, match="does not match its checksum"):
        verify_file(path, "0" * 64)
    with pytest.raises(RunFolderError) as err:
        verify_file(path, None)
    assert str(err.value).startswith(f"{path} has no checksum in the manifest")
    with pytest.raises(RunFolderError) as err:
        verify_file(tmp_path / "gone.parquet", sha256(path))
    assert str(err.value).startswith(f"{tmp_path / 'gone.parquet'} is missing, but the manifest lists it")


def test_listed_files_are_the_finished_arms_workloads_and_preflight(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2, incomplete=((1, "dlfp"),))
    edit_manifest(run, workloads={"trial-0/workload.parquet": "a" * 64, "trial-1/workload.parquet": "b" * 64},
                  design={"files": {PREFLIGHT_STEPS: "c" * 64}})
    manifest = read_manifest(run)
    files = listed_files(run, manifest)
    tables = [(p.relative_to(run).as_posix(), d) for p, d in files if p.parent.name in ("stock", "dlfp")]
    assert sorted({name.rsplit("/", 1)[0] for name, _ in tables}) == ["trial-0/dlfp", "trial-0/stock",
                                                                     "trial-1/stock"]
    assert len(tables) == 3 * len(TABLES)
    for name, digest in tables:
        assert sha256(run / name) == digest
    rest = [(p.relative_to(run).as_posix(), d) for p, d in files if p.parent.name not in ("stock", "dlfp")]
    assert rest == [("trial-0/workload.parquet", "a" * 64), ("trial-1/workload.parquet", "b" * 64),
                    (PREFLIGHT_STEPS, "c" * 64)]


@pytest.mark.parametrize(("where", "name"), [
    ("unit", "../../../etc/passwd"),
    ("unit", "requests.csv"),
    ("workloads", "trial-5/workload.parquet"),  # no such trial
    ("design", "preflight/other.parquet"),
])
def test_a_manifest_cannot_point_a_reader_elsewhere(tmp_path: Path, where: str, name: str) -> None:
    run = make_run(tmp_path)
    manifest = read_manifest(run)
    if where == "unit":
        manifest.units[0].files[name] = "d" * 64
    elif where == "workloads":
        manifest.workloads = {name: "d" * 64}
    else:
        manifest.design = {"files": {name: "d" * 64}}
    with pytest.raises(RunFolderError, match=f"lists a file {name!r} that no run writes"):
        listed_files(run, manifest)


# --- schema versions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", COMMITTED_MANIFESTS, ids=lambda p: p.parent.relative_to(REPO_ROOT).as_posix())
def test_every_committed_run_reads_and_writes_back_what_it_holds(path: Path) -> None:
    """Each committed manifest reads (schema 1: every run committed before the field) and its typed form
    writes back the same record, only the version added: nothing of it is lost or renamed on a resume."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    manifest = read_manifest(path.parent)
    assert manifest.schema == raw.get("schema", 1)
    assert manifest.to_json() == {**raw, "schema": SCHEMA}
    unknown = {*manifest.extra, *(k for u in manifest.units for k in u.extra)}
    assert not unknown, f"fields this code does not know: {sorted(unknown)}"
    check_status(path.parent, manifest, allow_partial=True)


def test_a_written_manifest_records_its_schema_and_reads_back_equal(tmp_path: Path) -> None:
    run = make_run(tmp_path, trials=2, incomplete=((1, "dlfp"),))
    manifest = read_manifest(run)
    manifest.units[-1] = Unit(trial=1, arm="dlfp", status="missing", seed=7)
    write_manifest(run, manifest)
    raw = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    assert raw["kind"] == KIND and raw["schema"] == SCHEMA and raw["identity_sha256"]
    assert raw["units"][-1] == {"trial": 1, "seed": 7, "arm": "dlfp", "status": "missing"}
    again = read_manifest(run)
    assert again.schema == SCHEMA and again.to_json() == manifest.to_json() and again.units == manifest.units


@pytest.mark.parametrize("schema", [SCHEMA + 1, 0, "2", True, None])
def test_a_schema_this_code_does_not_know_is_refused_naming_it(tmp_path: Path, schema: Any) -> None:
    run = make_run(tmp_path)
    edit_manifest(run, schema=schema)
    with pytest.raises(RunFolderError) as err:
        read_manifest(run)
    assert f"manifest schema {schema!r} is not one this dlfp reads (1 to {SCHEMA})" in str(err.value)
    assert "newer dlfp" in str(err.value)


def test_unknown_fields_are_kept_and_written_back(tmp_path: Path) -> None:
    """A field this code does not know (an edit, a tool's note) is neither dropped nor misread on a resume."""
    run = make_run(tmp_path)
    edit_manifest(run, reviewer_note="checked by hand")
    units = json.loads((run / MANIFEST).read_text(encoding="utf-8"))["units"]
    edit_manifest(run, units=[{**units[0], "note": "rerun twice"}, units[1]])
    manifest = read_manifest(run)
    assert manifest.extra == {"reviewer_note": "checked by hand"} and manifest.units[0].extra == {"note": "rerun twice"}
    write_manifest(run, manifest)
    written = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
    assert written["reviewer_note"] == "checked by hand" and written["units"][0]["note"] == "rerun twice"


def test_the_device_note_of_a_load_is_never_read_from_disk_nor_written(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    edit_manifest(run, device_unverified="made up")
    manifest = read_manifest(run)
    assert manifest.device_unverified is None and "device_unverified" not in manifest.extra
    manifest.device_unverified = "set in memory"
    assert "device_unverified" not in manifest.to_json()


@pytest.mark.parametrize(("field", "value"), [("seed", "7"), ("wall_s", "3 s"), ("ran", []), ("finished", 5),
                                              ("send_lateness_ms", 1.0)])
def test_a_unit_field_of_the_wrong_type_is_refused(tmp_path: Path, field: str, value: Any) -> None:
    run = make_run(tmp_path)
    units = json.loads((run / MANIFEST).read_text(encoding="utf-8"))["units"]
    edit_manifest(run, units=[units[0], {**units[1], field: value}])
    with pytest.raises(RunFolderError, match=r"field 'units\[1\]'"):
        read_manifest(run)


def test_a_manifest_built_in_code_needs_no_file_to_be_typed() -> None:
    m = Manifest(status="running", config={"trials": 1}, units=[Unit(trial=0, arm="stock", seed=1)])
    assert m.missing_units() == ["trial-0/stock"] and not m.complete and m.unit(0, "stock").seed == 1
    with pytest.raises(KeyError):
        m.unit(0, "dlfp")
