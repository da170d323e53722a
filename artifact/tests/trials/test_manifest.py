"""What a run manifest records and how a folder is opened (``dlfp.trials.manifest``), and its lock,
with a POSIX lock where the filesystem has no ``flock``."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from dlfp import paths
from dlfp.trials import runfolder, runner
from dlfp.trials.config import parse_config
from dlfp.trials.manifest import exclusive, sim_profile_record
from dlfp.trials.schema import identity_verified, read_manifest
from tests.trials.fakes import CONFIG, manifest


def test_simulated_run_records_its_profile_and_refuses_another_version(tmp_path, fake) -> None:
    from dlfp.sim.costmodel import PROFILE_DIR

    profile = tmp_path / "gpu.yaml"
    profile.write_text((PROFILE_DIR / "a100.yaml").read_text())
    config = parse_config({**CONFIG, "engine": {"sim": {"profile": str(profile)}}})
    out = tmp_path / "run"
    fake(fail_at=2, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(config, out, progress=False)
    record = manifest(out)["sim_profile"]
    assert record["sha256"] == paths.sha256(profile) and record["values"]["compute"]["peak_tflops"]["value"] == 312
    profile.write_text(profile.read_text().replace("value: 0.6,", "value: 0.7,", 1))
    arms = fake()
    with pytest.raises(runfolder.RunFolderError, match="another version of cost profile"):
        runner.run_trials(config, out, progress=False)
    assert arms.calls == []
    shipped = parse_config({**CONFIG, "engine": {"sim": {"profile": "h200"}}})
    assert sim_profile_record(shipped)["file"] == "dlfp/sim/profiles/h200.yaml (shipped)"


def test_a_second_writer_into_the_same_folder_is_refused(tmp_path, fake) -> None:
    fake()
    out = tmp_path / "run"
    with exclusive(out), pytest.raises(runfolder.RunFolderError, match="another dlfp process"):
        runner.run_trials(parse_config(CONFIG), out, progress=False)  # while another job holds the folder
    assert runner.run_trials(parse_config(CONFIG), out, progress=False).status == "complete"


def _flock_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    """``flock`` as on Lustre mounted without ``-o flock``."""
    import fcntl

    def flock(fd: object, operation: int) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", flock)


HOLD = """
import fcntl, sys, time
fh = open(sys.argv[1], "a+")
fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
time.sleep(60)
"""


def test_without_flock_the_folder_is_held_by_a_posix_lock(tmp_path, monkeypatch) -> None:
    out = tmp_path / "run"
    _flock_unsupported(monkeypatch)
    with exclusive(out):  # a POSIX lock instead: the trial runs
        pass
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / ".run.dlfp-lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(runfolder.RunFolderError, match="another dlfp process"), exclusive(out):
            pass  # another process (a resubmitted job) holds the lock
    finally:
        holder.kill()
        holder.wait()


def test_without_any_lock_the_error_names_the_mount_option(tmp_path, monkeypatch) -> None:
    import fcntl

    _flock_unsupported(monkeypatch)

    def lockf(fd: object, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "lockf", lockf)
    no_locks = r"neither flock nor POSIX locks .*mount it with -o flock"
    with pytest.raises(runfolder.RunFolderError, match=no_locks), exclusive(tmp_path / "run"):
        pass


def test_other_lock_errors_are_not_taken_for_a_missing_flock(tmp_path, monkeypatch) -> None:
    import fcntl

    def flock(fd: object, operation: int) -> None:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(OSError, match="Bad file descriptor"), exclusive(tmp_path / "run"):
        pass


def test_a_measured_run_resumes_only_on_the_kind_of_machine_that_started_it(tmp_path, fake, monkeypatch) -> None:
    from dlfp.harness import telemetry

    real = telemetry.describe_hardware()
    out = tmp_path / "run"
    fake(fail_at=2, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    other = {**real, "cpu_model": "Another CPU @ 1.00GHz", "hostname": "elsewhere"}
    monkeypatch.setattr(telemetry, "describe_hardware", lambda: other)
    arms = fake()
    with pytest.raises(runfolder.RunFolderError, match="would mix two machines' measurements"):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    assert arms.calls == [] and manifest(out)["status"] != "complete"
    # Another host of the same kind (a cluster node) resumes; so does a simulated run anywhere.
    monkeypatch.setattr(telemetry, "describe_hardware", lambda: {**real, "hostname": "node-7", "memory_gib": 1.0})
    assert runner.run_trials(parse_config(CONFIG), out, progress=False).status == "complete"
    sim = parse_config({**CONFIG, "engine": {"sim": {"profile": "a100"}}})
    fake(fail_at=2, fail=KeyboardInterrupt())
    monkeypatch.setattr(telemetry, "describe_hardware", lambda: real)
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(sim, tmp_path / "sim", progress=False)
    monkeypatch.setattr(telemetry, "describe_hardware", lambda: other)
    fake()
    assert runner.run_trials(sim, tmp_path / "sim", progress=False).status == "complete"


def test_a_resume_refuses_a_manifest_whose_identity_was_edited(tmp_path, fake) -> None:
    """A resume re-signs the manifest it writes, so it checks the signature first: an edit made while the run
    was stopped would otherwise be vouched for by the run's own checksum."""
    out = tmp_path / "run"
    fake(fail_at=2, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    edited = manifest(out)
    assert identity_verified(out, read_manifest(out))
    edited["versions"]["vllm"] = "0.32.0"
    paths.write_json_atomic(out / runfolder.MANIFEST, edited)
    arms = fake()
    with pytest.raises(runfolder.RunFolderError, match="does not match its checksum"):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    assert arms.calls == [] and manifest(out)["versions"]["vllm"] == "0.32.0"  # refused, nothing re-signed
