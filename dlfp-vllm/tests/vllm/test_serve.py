"""The plug-in as a deployer runs it: ``vllm serve`` with ``--scheduler-cls`` and ``--additional-config``,
loaded with ``vllm bench serve``, both through ``dlfp-vllm`` (vLLM's own command line; the CPU wheel's
``vllm`` script cannot start, :mod:`dlfp.vllm.cli`).

The tiny model of :mod:`tests.rig` with random weights, a word-level tokenizer made on the spot, twelve
random prompts of about 1536 tokens sent at once: they queue behind the 2048-token budget, so the first
ones decode while the rest prefill, on a machine of any speed, and those mixed steps are where the
paper's law caps the prefill chunk. The
engine runs the plug-in's stamped executor (:mod:`dlfp.vllm.executors`, named by
``--distributed-executor-backend``), which the ``completion`` signal needs. The step log the scheduler
writes says which scheduler ran with which parameters, what it capped, and when each step's output
became available.
Slow (about two minutes on 2 cores: the server's start is most of it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from dlfp.control.steplog import read_step_log
from tests.rig import write_tiny_model, write_tokenizer

CHUNK_MAX = 256
"""The law's largest chunk: well under the engine's 2048-token budget, so every mixed step is capped."""


def _dlfp_vllm() -> str:
    script = Path(sys.executable).with_name("dlfp-vllm")
    if not script.is_file():
        pytest.skip("the dlfp-vllm script is not installed beside this Python (pip install dlfp-vllm)")
    return str(script)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(1)
    pytest.fail(f"the server was not healthy after {timeout_s} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_vllm_serve_with_the_plug_in_passes_vllm_bench_serve(tmp_path: Path) -> None:
    script = _dlfp_vllm()
    model = write_tokenizer(write_tiny_model(tmp_path / "tiny"))
    steps, server_log, port = tmp_path / "steps.jsonl", tmp_path / "server.log", _free_port()
    dlfp = {"chunk_min": 32, "chunk_init": CHUNK_MAX, "chunk_max": CHUNK_MAX, "saturation_guard": False,
            "step_log": str(steps)}
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 1) - 1}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    if os.cpu_count() == 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    serve = [script, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy",
             "--dtype", "float32", "--max-model-len", "4096", "--max-num-batched-tokens", "2048",
             "--no-enable-prefix-caching", "--scheduler-cls", "dlfp.vllm.DLFPScheduler",
             "--distributed-executor-backend", "dlfp.vllm.executors.TimedUniProcExecutor",
             "--additional-config", json.dumps({"dlfp": dlfp})]
    url = f"http://127.0.0.1:{port}"
    with server_log.open("wb") as out:
        server = subprocess.Popen(serve, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(url, server, server_log, timeout_s=600)
            bench = [script, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", str(model),
                     "--dataset-name", "random", "--random-input-len", "1536", "--random-output-len", "32",
                     "--random-range-ratio", "0.9", "--num-prompts", "12", "--request-rate", "inf", "--seed", "0",
                     "--save-result", "--result-dir", str(tmp_path), "--result-filename", "bench.json"]
            done = subprocess.run(bench, env=env, capture_output=True, text=True, timeout=900, check=False)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        finally:
            server.terminate()
            server.wait(timeout=60)
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == 12 and result.get("failed", 0) == 0, result
    assert result["total_output_tokens"] > 0 and result["p99_itl_ms"] > 0

    (header, records), = list(read_step_log(steps))
    assert header["scheduler"] == "DLFPScheduler" and header["params"]["chunk_max"] == CHUNK_MAX
    assert header["executor"] == "dlfp.vllm.executors.TimedUniProcExecutor"
    stamped = [r for r in records if r["exec_done_t"] is not None]
    assert len(stamped) >= 0.9 * len(records) and all(r["exec_done_t"] >= r["schedule_t"] for r in stamped)
    mixed = [r for r in records if r["decode_reqs"] > 0 and r["prefill_tokens"] > 0]
    assert mixed, "no step carried prefill beside decodes: the load did not overlap"
    assert not any(r["saturated"] for r in records)
    over = [r for r in mixed if r["cap"] is None or r["prefill_tokens"] > r["cap"] or r["cap"] > CHUNK_MAX]
    assert not over, f"mixed steps without the law's cap: {over[:3]}"
    alone = [r for r in records if r["decode_reqs"] == 0 and r["prefill_tokens"] > 0]
    assert all(r["cap"] is None for r in alone), "a prefill with no decode beside it was capped"
