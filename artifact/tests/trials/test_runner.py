"""The trial runner's promises about data: validation first, atomic units, resume, refusal.

The engine arm is replaced by a recorder that fabricates a tiny trace (fault injection:
it can raise ``KeyboardInterrupt`` or an error in a chosen unit); the real engine runs in
``test_trial_cpu.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dlfp import paths
from dlfp.harness.arm import ArmResult
from dlfp.harness.driver import TrialTrace
from dlfp.trials import interrupts, runfolder, runner
from dlfp.trials.config import parse_config
from dlfp.trials.manifest import exclusive, sim_profile_record
from dlfp.trials.prediction import Measured
from dlfp.trials.preflight import PreflightResult

CONFIG = {"name": "unit", "trials": 2, "workload": {"n_requests": 3, "rate_rps": 50.0}}


class FakeArms:
    """Stands in for ``dlfp.harness.arm.run_arm``; raises ``fail`` on call number ``fail_at``."""

    def __init__(self, fail_at: int | None = None, fail: BaseException | None = None) -> None:
        self.calls: list[bool] = []
        self.fail_at, self.fail = fail_at, fail

    def __call__(self, spec, requests, step_log: Path, progress=None, telemetry_interval_s=0.5):
        self.calls.append(spec.dlfp["enabled"])
        if self.fail_at == len(self.calls):
            raise self.fail
        reqs = pd.DataFrame([{"request_id": r.request_id, "arrival_s": r.arrival_s, "send_s": r.arrival_s,
                              "first_token_s": r.arrival_s + 0.1, "finish_s": r.arrival_s + 0.2,
                              "prompt_len": r.prompt_len, "output_len_requested": r.output_len,
                              "output_len": r.output_len, "status": "ok", "error": None}
                             for r in requests])
        toks = pd.DataFrame([{"request_id": r.request_id, "index": i, "t_s": r.arrival_s + 0.1 + i / 100,
                              "token_id": 7} for r in requests for i in range(r.output_len)])
        steps = pd.DataFrame({"step": [0], "schedule_t": [0.0], "complete_t": [0.01]})
        tele = pd.DataFrame({"t_s": [0.0], "source": ["cpu"], "metric": ["util_pct"], "value": [50.0]})
        return ArmResult(TrialTrace(reqs, toks, 0.0, [0.0] * len(requests)), steps, tele)


CPU_LIKE = Measured(decode_s=0.010, prefill_fixed_s=0.005, prefill_per_token_s=1e-4, decoders=4, source="fake")
"""A pre-flight result like the 2-core CPU engine's, so the scaled design derives without refusal."""


def fake_preflight(measured: Measured = CPU_LIKE):
    def run(spec, facts, decoders, vocab, source) -> PreflightResult:
        assert not spec.dlfp["enabled"]  # the pre-flight measures the stock engine
        steps = pd.DataFrame({"step": [0, 1], "schedule_t": [0.0, 0.01], "complete_t": [0.01, 0.02],
                              "prefill_tokens": [0, 0], "decode_reqs": [4, 4]})
        return PreflightResult(measured, steps)
    return run


@pytest.fixture
def fake(monkeypatch):
    def install(measured: Measured = CPU_LIKE, **kw) -> FakeArms:
        arms = FakeArms(**kw)
        monkeypatch.setattr("dlfp.harness.arm.run_arm", arms)
        monkeypatch.setattr("dlfp.trials.preflight.run_preflight", fake_preflight(measured))
        return arms
    return install


def manifest(out: Path) -> dict:
    return json.loads((out / runfolder.MANIFEST).read_text())


def test_complete_run_layout_and_arm_order(tmp_path, fake) -> None:
    arms = fake()
    out = tmp_path / "run"
    m = runner.run_trials(parse_config(CONFIG), out, progress=False)
    assert m["status"] == "complete" and m["missing"] == []
    assert arms.calls == [False, True, True, False]  # arm order alternates across trials
    for u in m["units"]:
        for name, digest in u["files"].items():
            assert paths.sha256(out / f"trial-{u['trial']}" / u["arm"] / name) == digest
    assert set(m["workloads"]) == {"trial-0/workload.parquet", "trial-1/workload.parquet"}
    assert m["versions"]["vllm"] and m["hardware"]["cpu_logical_cores"]
    assert not list(out.rglob("*.partial")) and not list(out.rglob("steps.jsonl"))


def test_interrupt_keeps_finished_units_and_resumes(tmp_path, fake) -> None:
    out = tmp_path / "run"
    fake(fail_at=3, fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    m = manifest(out)
    assert m["status"] == "interrupted"
    assert m["missing"] == ["trial-1/dlfp", "trial-1/stock"]
    assert (out / "trial-0" / "stock" / "requests.parquet").exists()
    kept = (out / "trial-0" / "dlfp" / "tokens.parquet").read_bytes()
    arms = fake()
    m = runner.run_trials(parse_config(CONFIG), out, progress=False)
    assert m["status"] == "complete" and arms.calls == [True, False]  # only the missing units
    assert (out / "trial-0" / "dlfp" / "tokens.parquet").read_bytes() == kept


def test_failure_is_recorded(tmp_path, fake) -> None:
    fake(fail_at=2, fail=RuntimeError("engine died"))
    with pytest.raises(RuntimeError):
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    m = manifest(tmp_path / "run")
    assert m["status"] == "failed" and "engine died" in m["error"] and len(m["missing"]) == 3


def test_refuses_other_config_or_foreign_folder(tmp_path, fake) -> None:
    fake()
    out = tmp_path / "run"
    runner.run_trials(parse_config(CONFIG), out, progress=False)
    before = (out / runfolder.MANIFEST).read_text()
    with pytest.raises(runfolder.RunFolderError, match="different config"):
        runner.run_trials(parse_config({**CONFIG, "name": "other"}), out, progress=False)
    assert (out / runfolder.MANIFEST).read_text() == before
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(runfolder.RunFolderError, match="not empty"):
        runner.run_trials(parse_config(CONFIG), foreign, progress=False)
    assert runner.run_trials(parse_config(CONFIG), out, progress=False)["status"] == "complete"


@pytest.mark.parametrize(("raw", "needle"), [
    ({"trials": 0}, "'trials' = 0"),
    ({"engine": {"model": "nope"}}, "'engine.model' = 'nope'"),
    ({"engine": {"max_num_seqs": 0}}, "'engine.max_num_seqs' = 0"),
    ({"engine": {"gpu": 1}}, "unknown engine setting(s) ['gpu']"),
    ({"dlfp": {"gain": 9}}, "'gain' = 9"),
    ({"dlfp": {"enabled": True}}, "'dlfp.enabled'"),
    ({"workload": {"rate_rps": -1}}, "rate_rps"),
    ({"slo": {"ttft_ms": 0}}, "'slo.ttft_ms' = 0"),
    ({"seeds": [1, 1, 2]}, "'seeds'"),
    ({"trails": 3}, "unknown config field(s) ['trails']"),
])
def test_bad_config_refused_before_any_work(raw: dict, needle: str, tmp_path, fake) -> None:
    arms = fake()
    with pytest.raises(ValueError) as err:
        runner.run_trials(parse_config(raw), tmp_path / "run", progress=False)
    assert needle in str(err.value)
    assert arms.calls == [] and not (tmp_path / "run").exists()


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


def test_missing_profile_refused_before_any_arm(tmp_path, fake) -> None:
    arms = fake()
    config = parse_config({**CONFIG, "engine": {"sim": {"profile": str(tmp_path / "none.yaml")}}})
    with pytest.raises(ValueError, match="unknown profile"):
        runner.run_trials(config, tmp_path / "run", progress=False)
    assert arms.calls == []


class _EngineKilledByCtrlC(Exception):
    """What vLLM raises when SIGINT killed the engine core during start-up."""


def test_ctrl_c_reported_as_another_error_is_still_an_interruption(tmp_path, fake, monkeypatch) -> None:
    import os
    import signal
    import time

    arms = fake()
    real = arms.__call__

    def start_engine_then_ctrl_c(spec, requests, step_log, progress=None, telemetry_interval_s=0.5):
        if len(arms.calls) == 1:  # the second unit: Ctrl-C while its engine starts
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                raise _EngineKilledByCtrlC("Engine core initialization failed") from None
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", start_engine_then_ctrl_c)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        runner.run_trials(parse_config(CONFIG), out, progress=False)
    m = manifest(out)
    assert m["status"] == "interrupted" and m["error"] is None
    assert m["missing"] == ["trial-0/dlfp", "trial-1/dlfp", "trial-1/stock"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


def test_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_temp(tmp_path) -> None:
    path = tmp_path / "report.json"
    paths.write_json_atomic(path, {"v": 1})
    with pytest.raises(TypeError):
        paths.write_text_atomic(path, b"not text")  # type: ignore[arg-type]  # fails mid-write
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def _unit_config(tmp_path: Path) -> Path:
    import yaml

    path = tmp_path / "unit.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


def test_sigterm_is_an_interruption_with_its_own_exit_code(tmp_path, fake, monkeypatch, capsys) -> None:
    """SLURM's time limit and scancel send SIGTERM: handled as Ctrl-C is, exit code 143."""
    import os
    import signal
    import time

    from dlfp.cli import main

    arms = fake()
    real = arms.__call__

    def sigterm_in_second_unit(spec, requests, step_log, progress=None, telemetry_interval_s=0.5):
        if len(arms.calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises long before
            raise AssertionError("SIGTERM was not handled")
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", sigterm_in_second_unit)
    config, out = _unit_config(tmp_path), tmp_path / "run"
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 143
    assert "interrupted (SIGTERM)" in capsys.readouterr().err
    m = manifest(out)
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM" and m["error"] is None
    assert m["missing"] == ["trial-0/dlfp", "trial-1/dlfp", "trial-1/stock"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handler restored
    arms = fake()
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 0
    assert arms.calls == [True, True, False] and manifest(out)["status"] == "complete"


def test_dead_engine_core_fails_the_run_with_exit_code_1(tmp_path, fake, capsys) -> None:
    from dlfp.cli import main
    from dlfp.vllm.lifeline import EngineCoreDied

    fake(fail_at=2, fail=EngineCoreDied("the engine core process died during the arm"))
    config, out = _unit_config(tmp_path), tmp_path / "run"
    assert main(["trial", str(config), "--out", str(out), "--quiet"]) == 1
    assert "rerun the same command to resume" in capsys.readouterr().err
    m = manifest(out)
    assert m["status"] == "failed" and m["error"].startswith("EngineCoreDied: ") and m["interrupted_by"] is None
    assert len(m["missing"]) == 3


def test_an_ignored_signal_stays_ignored() -> None:
    """``nohup``-style or background jobs ignore SIGINT: the runner must not un-ignore it."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.watch_interrupt():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_swallowed_signal_is_delivered_again(tmp_path, fake, monkeypatch) -> None:
    """vLLM 0.32 swallows a KeyboardInterrupt raised while its client waits for a starting engine
    (``zmq_socket_ctx``); the runner delivers the signal again until it stops the run."""
    import os
    import signal
    import time

    arms = fake()
    real = arms.__call__
    swallowed: list[float] = []

    def engine_start_that_swallows(spec, requests, step_log, progress=None, telemetry_interval_s=0.5):
        if len(arms.calls) == 1:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                swallowed.append(time.monotonic())  # as vLLM does: logged, then carry on
            time.sleep(5)  # the rest of the start-up and the arm
            raise AssertionError("the swallowed SIGTERM was not delivered again")
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", engine_start_that_swallows)
    with pytest.raises(interrupts.Interrupted) as stopped:
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    assert stopped.value.exit_code == 143 and len(swallowed) == 1
    assert time.monotonic() - swallowed[0] < interrupts.REDELIVER_S + 1
    m = manifest(tmp_path / "run")
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_the_repeat_delivery_does_not_cut_an_engine_shutdown_short(tmp_path, fake, monkeypatch) -> None:
    import asyncio
    import os
    import signal
    import threading
    import time

    arms = fake()
    shutdown: list[str] = []

    async def replay() -> None:
        try:
            await asyncio.sleep(30)
        except BaseException:  # asyncio unwinds the arm's task with CancelledError
            time.sleep(2.5 * interrupts.REDELIVER_S)  # engine.shutdown(), with repeats arriving meanwhile
            shutdown.append("done")
            raise

    def arm_stopped_mid_replay(spec, requests, step_log, progress=None, telemetry_interval_s=0.5):
        arms.calls.append(spec.dlfp["enabled"])
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        asyncio.run(replay())

    monkeypatch.setattr("dlfp.harness.arm.run_arm", arm_stopped_mid_replay)
    with pytest.raises(interrupts.Interrupted):
        runner.run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    assert shutdown == ["done"] and manifest(tmp_path / "run")["interrupted_by"] == "SIGTERM"


def test_an_interrupt_cancels_the_coroutine_running_on_the_worker_thread() -> None:
    """In a Jupyter kernel an arm runs on a worker thread; Ctrl-C must stop it, not leave it running."""
    import asyncio
    import signal
    import threading

    from dlfp.harness.arm import run_coroutine

    cancelled = threading.Event()

    async def arm() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def kernel() -> None:  # a running loop, as in a notebook
        main = threading.main_thread().ident
        threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()  # Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            run_coroutine(arm())

    loop = asyncio.new_event_loop()  # not asyncio.run, whose own SIGINT handler would swallow the Ctrl-C
    try:
        loop.run_until_complete(kernel())
    finally:
        loop.close()
    assert cancelled.is_set()


def test_a_second_writer_into_the_same_folder_is_refused(tmp_path, fake) -> None:
    fake()
    out = tmp_path / "run"
    with exclusive(out), pytest.raises(runfolder.RunFolderError, match="another dlfp process"):
        runner.run_trials(parse_config(CONFIG), out, progress=False)  # while another job holds the folder
    assert runner.run_trials(parse_config(CONFIG), out, progress=False)["status"] == "complete"
