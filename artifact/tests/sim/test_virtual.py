"""Virtual time: vLLM's own engine core on a discrete-event clock (:mod:`dlfp.sim.virtual`).

A fitted profile with round numbers makes every time of a synchronous run a sum a reader can do by
hand; the async tests check the overlap vLLM's batch queue gives; the rest check that outputs are the
real-time executor's, that a run reads no real clock (the same bytes in another process, under load),
and that what virtual time cannot model is refused before any work.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlfp.control.steplog import read_step_log
from dlfp.harness.engine import EngineSpec, engine_kwargs
from dlfp.paths import model_path
from dlfp.sim.costmodel import EngineHost, ModelShape, engine_section
from dlfp.sim.executor import prompt_digest, sampled_token
from dlfp.sim.stepfit import Fit, FittedProfile
from dlfp.sim.virtual import OpenLoop, Submission, VirtualClock, simulate, unsupported

HOST = EngineHost(schedule_us=100, schedule_request_us=10, update_us=50, update_request_us=5, output_us=200,
                  output_request_us=20, input_us=300)
"""Engine-core host costs of the hand-checked runs (microseconds)."""
FIT = Fit(a=1e-3, e=0.0, b=1e-6, c=1e-3, d=0.0, n_train=0, n_test=0, heldout_p50=0.0, heldout_p90=0.0, seed=0)
"""Stream time per step: 1 ms, plus 1 us per prefill token and 1 ms per decode."""


def fitted(tmp_path: Path) -> str:
    shape = asdict(ModelShape.from_dir(model_path("qwen3-tiny")))
    path = tmp_path / "fitted.yaml"
    path.write_text(FittedProfile("fitted-test", "test", FIT, shape, kv_cache_gib=0.5).to_yaml())
    return str(path)


def engine(tmp_path: Path, host: EngineHost = HOST) -> str:
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump({"name": "test", "engine": engine_section(host, "assumed")}))
    return str(path)


def kwargs(profile: str, async_scheduling: bool, host: str = "gpu-node", **dlfp: Any) -> dict[str, Any]:
    spec = EngineSpec(model="qwen3-tiny", max_model_len=2048, max_num_batched_tokens=512, max_num_seqs=16,
                      sim={"profile": profile, "async_scheduling": async_scheduling, "clock": "virtual",
                           "engine": host},
                      dlfp={"enabled": False, **dlfp})
    return engine_kwargs(spec)


def hand(tmp_path: Path, async_scheduling: bool, host: EngineHost = HOST) -> dict[str, Any]:
    """The hand-checked runs' engine: the round-number fit and engine costs."""
    return kwargs(fitted(tmp_path), async_scheduling, engine(tmp_path, host))


def prompt(i: int, n: int) -> list[int]:
    return [100 + (i * 7919 + j * 31) % 30000 for j in range(n)]


def steps_of(log: Path) -> list[dict[str, Any]]:
    [(_, rows)] = list(read_step_log(log))
    return rows


def test_clock_moves_forward_only() -> None:
    clock = VirtualClock()
    clock.advance(0.5)
    clock.advance_to(0.2)
    assert clock() == 0.5
    clock.advance_to(1.5)
    assert clock() == 1.5


def test_a_sync_run_is_the_profiles_arithmetic(tmp_path: Path) -> None:
    """One 40-token prompt, three tokens, synchronous: schedule, stream, update, output, by hand."""
    log = tmp_path / "steps.jsonl"
    got = simulate(hand(tmp_path, async_scheduling=False), OpenLoop([Submission("r0", prompt(0, 40), 3, 0.0)]),
                   log)["r0"]
    ms = 1e-3
    sched, update, out = (100 + 10) * 1e-6, (50 + 5) * 1e-6, (200 + 20) * 1e-6
    t0 = 0.3 * ms  # the input path
    prefill_end = t0 + sched + (1 * ms + 40e-6)
    *steps, flush = steps_of(log)
    # After the last token vLLM runs one empty step, which hands the finished request's id to the runner.
    assert flush["total_tokens"] == 0 and flush["schedule_t"] == pytest.approx(steps[-1]["complete_t"] + update)
    assert [s["prefill_tokens"] for s in steps] == [40, 0, 0]
    expected_schedule = [t0, prefill_end + update, prefill_end + update + sched + 2 * ms + update]
    assert [s["schedule_t"] for s in steps] == pytest.approx(expected_schedule, abs=1e-12)
    for s in steps:  # each step completes (its stamp) when its stream time is over, and is collected then
        assert s["exec_done_t"] == pytest.approx(s["complete_t"], abs=1e-12)
        assert s["complete_source"] == "exec_done"
    done = [prefill_end, *(t + sched + 2 * ms for t in expected_schedule[1:])]
    assert [s["complete_t"] for s in steps] == pytest.approx(done, abs=1e-12)
    assert got.token_t == pytest.approx([t + update + out for t in done], abs=1e-12)
    assert got.finish_s == got.token_t[-1]


def test_async_scheduling_runs_one_step_ahead(tmp_path: Path) -> None:
    """Under async scheduling step N+1 is scheduled before step N has finished, and a steady decode
    runs at the stream's pace: here the stream (2 ms a step with 1 decode) outlasts the host loop."""
    log = tmp_path / "steps.jsonl"
    simulate(hand(tmp_path, async_scheduling=True), OpenLoop([Submission("r0", prompt(0, 40), 20, 0.0)]), log)
    steps = [s for s in steps_of(log) if s["total_tokens"] > 0]
    assert len(steps) == 20
    ahead = [b["schedule_t"] < a["exec_done_t"] for a, b in pairwise(steps)]
    assert all(ahead)
    cadence = [b["exec_done_t"] - a["exec_done_t"] for a, b in pairwise(steps[1:])]
    assert cadence == pytest.approx([2e-3] * len(cadence), abs=1e-12)


def test_async_is_host_bound_where_the_host_loop_outlasts_the_stream(tmp_path: Path) -> None:
    """A host 40x slower than the stream's 2 ms: the steps come at the host loop's pace instead."""
    slow = HOST.scaled(40)
    log = tmp_path / "steps.jsonl"
    client = OpenLoop([Submission("r0", prompt(0, 40), 12, 0.0)])
    simulate(hand(tmp_path, async_scheduling=True, host=slow), client, log)
    steps = [s for s in steps_of(log) if s["total_tokens"] > 0]
    loop = slow.schedule_s(1) + slow.update_s(1)  # one schedule and one update per step, nothing else on the host
    cadence = [b["schedule_t"] - a["schedule_t"] for a, b in pairwise(steps[2:])]
    assert loop > 2e-3 and cadence == pytest.approx([loop] * len(cadence), abs=1e-12)


def test_outputs_are_the_real_time_executors_tokens(tmp_path: Path) -> None:
    subs = [Submission(f"r{i}", prompt(i, 30 + 90 * i), 5 + i, 0.001 * i) for i in range(6)]
    got = simulate(kwargs("h200", async_scheduling=True), OpenLoop(subs))
    vocab = 32000
    for s in subs:
        digest = prompt_digest(list(s.prompt_token_ids))
        n = len(s.prompt_token_ids)
        assert got[s.request_id].token_ids == [sampled_token(digest, n + k, vocab) for k in range(s.output_len)]


def test_an_idle_engine_waits_for_the_next_arrival(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    got = simulate(hand(tmp_path, async_scheduling=False),
                   OpenLoop([Submission("a", prompt(0, 10), 2, 0.0), Submission("b", prompt(1, 10), 2, 5.0)]), log)
    first_b = next(s for s in steps_of(log) if s["schedule_t"] > 1.0)
    assert first_b["schedule_t"] == pytest.approx(5.0 + HOST.input_s, abs=1e-12)
    assert got["a"].finish_s < 0.01 < 5.0 < got["b"].token_t[0]


def test_an_unknown_engine_profile_is_refused_before_any_work() -> None:
    from dlfp.trials.config import parse_config

    with pytest.raises(ValueError, match=r"engine\.sim\.engine.*unknown engine-core profile 'b300-node'"):
        parse_config({"engine": {"model": "qwen3-0.6b", "sim": {"clock": "virtual", "engine": "b300-node"}}})
    with pytest.raises(ValueError, match="engine-core profile prices it in virtual time only"):
        parse_config({"engine": {"model": "qwen3-0.6b", "sim": {"engine": "gpu-node-fast"}}})


def test_features_virtual_time_does_not_model_are_named() -> None:
    from vllm import AsyncEngineArgs

    config = AsyncEngineArgs(**{**kwargs("a100", True), "distributed_executor_backend": "uni"}).create_engine_config()
    assert unsupported(config) == []
    config.lora_config = object()
    config.parallel_config.pipeline_parallel_size = 2
    assert unsupported(config) == ["LoRA", "engine-level parallelism (model TP is dlfp_sim.tp)"]


def test_engine_profiles_read_back_and_refuse_bad_values(tmp_path: Path) -> None:
    from dlfp.sim.costmodel import load_engine_host

    assert load_engine_host(engine(tmp_path)) == HOST
    fast, node = load_engine_host("gpu-node-fast"), load_engine_host("gpu-node").scaled(0.1)
    assert all(getattr(fast, f) == pytest.approx(getattr(node, f)) for f in EngineHost.__slots__)
    assert engine_section(HOST, "assumed")["input_us"] == {"value": 300, "source": "assumed"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(engine(tmp_path)).read_text().replace("value: 200", "value: 0"))
    with pytest.raises(ValueError, match=r"engine.output_us.*must be in \(0, inf\)"):
        load_engine_host(bad)
    bad.write_text("name: x\nengine: {schedule_us: {value: 1, source: assumed}}\n")
    with pytest.raises(ValueError, match=r"missing 'engine\.schedule_per_request_us'"):
        load_engine_host(bad)


SNIPPET = """
import hashlib, json, sys
from dlfp.sim.virtual import OpenLoop, Submission, simulate
kw = json.loads(sys.argv[1])
subs = [Submission(f"r{i}", [100 + (i * 7 + j) % 3000 for j in range(40 + 37 * i)], 20 + i, 0.0004 * i)
        for i in range(24)]
got = simulate(kw, OpenLoop(subs), None)
blob = json.dumps({k: [v.token_ids, v.token_t, v.finish_s] for k, v in sorted(got.items())})
print(hashlib.sha256(blob.encode()).hexdigest())
"""


@pytest.mark.slow
def test_a_run_is_the_same_in_another_process_beside_a_cpu_hog() -> None:
    """Nothing on the virtual path reads a real clock or a per-process hash: the same run in two fresh
    processes, one with another hash seed and a busy loop on every core beside it, gives the same bytes."""
    kw = json.dumps(kwargs("a100", True))

    def run(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, "-c", SNIPPET, kw], env=env, capture_output=True, text=True,
                              check=True, timeout=600).stdout.strip().splitlines()[-1]

    quiet = run("0")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        busy = run("12345")
    finally:
        for h in hogs:
            h.kill()
    assert len(quiet) == 64 and quiet == busy
    assert hashlib.sha256(b"").hexdigest() != quiet


def test_real_time_only_config_fields_are_refused() -> None:
    from dlfp.trials.config import parse_config

    base = {"engine": {"model": "qwen3-0.6b", "sim": {"profile": "a100", "clock": "virtual"}}}
    parse_config(base)
    for over, field in (({"reuse_engine": True}, "reuse_engine"),
                        ({"telemetry_interval_s": 0.1}, "telemetry_interval_s"),
                        ({"warmup_requests": 4}, "warmup_requests"),
                        ({"engine": {**base["engine"], "extra": {"enforce_eager": True}}}, "engine.extra"),
                        ({"engine": {**base["engine"], "kv_cache_gib": 8}}, "engine.kv_cache_gib")):
        with pytest.raises(ValueError, match=field.replace(".", r"\.") + ".*virtual|" + field):
            parse_config({**base, **over})
    parse_config({**base, "engine": {**base["engine"], "extra": {"num_gpu_blocks_override": 512}}})
    real = replace(parse_config({**base, "engine": {**base["engine"], "sim": {"profile": "a100"}}}).engine)
    assert not real.virtual and parse_config(base).engine.virtual
