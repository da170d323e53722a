"""DLFP inside vLLM's real scheduler, driven step by step with fabricated model outputs.

This is how the async variant is exercised on CPUs, where vLLM forces async scheduling
off in a real engine; the sync variant is also run in a real engine in
``test_engine_cpu.py``.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import pytest

pytest.importorskip("vllm")

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from dlfp.control.params import DLFPConfigError
from dlfp.control.signals import COLLECT, EXEC_DONE, spread_controller_fields
from dlfp.vllm import DLFPAsyncScheduler, DLFPScheduler
from dlfp.vllm.direct import make_request, run_to_completion
from tests.rig import make_scheduler

CAP = 128
DLFP = {"chunk_min": CAP, "chunk_init": CAP, "chunk_max": CAP}


def workload() -> dict[int, list]:
    """Eight short requests decoding, then two 2000-token prompts arriving mid-decode."""
    return {
        0: [make_request(f"d{i}", 32, 60) for i in range(8)],
        5: [make_request("long0", 2000, 4)],
        20: [make_request("long1", 2000, 4)],
    }


def per_step(outputs: list, rid: str) -> list[int]:
    return [o.num_scheduled_tokens.get(rid, 0) for o in outputs]


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("named", [DLFPScheduler, DLFPAsyncScheduler])
def test_either_name_picks_the_engine_variant(named: type, async_scheduling: bool) -> None:
    s = make_scheduler(named, async_scheduling=async_scheduling, dlfp=DLFP)
    assert isinstance(s, AsyncScheduler) == async_scheduling
    assert isinstance(s, DLFPScheduler)
    outputs = run_to_completion(s, workload(), async_depth=2 if async_scheduling else 1)
    # A decoding request gets a token in every step until it finishes: no every-other-step
    # slowdown. d0 needs 1 prefill step + 59 decode steps (+1 trailing async step at most).
    steps_d0 = [i for i, n in enumerate(per_step(outputs, "d0")) if n]
    assert steps_d0 == list(range(len(steps_d0))) and 60 <= len(steps_d0) <= 61


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_mixed_steps_are_capped_isolated_prefill_is_not(async_scheduling: bool) -> None:
    s = make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp=DLFP)
    outputs = run_to_completion(
        s,
        {0: [make_request("solo", 2000, 2)], 10: workload()[0], 30: [make_request("long", 2000, 2)]},
        async_depth=2 if async_scheduling else 1,
    )
    solo = per_step(outputs, "solo")
    assert solo[0] == 2000  # no decodes running: the whole prompt in one step
    long_chunks = [n for n in per_step(outputs, "long") if n > 1]
    assert long_chunks and max(long_chunks) <= CAP  # overlaps running decodes: capped
    assert sum(long_chunks) == 2000


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_stock_and_disabled_dlfp_schedule_identically(async_scheduling: bool) -> None:
    stock_cls = AsyncScheduler if async_scheduling else Scheduler
    depth = 2 if async_scheduling else 1
    stock = run_to_completion(make_scheduler(stock_cls, async_scheduling=async_scheduling),
                              workload(), async_depth=depth)
    off = run_to_completion(
        make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp={"enabled": False}),
        workload(), async_depth=depth)
    assert [dict(o.num_scheduled_tokens) for o in stock] == [
        dict(o.num_scheduled_tokens) for o in off
    ]
    on = run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=async_scheduling,
                                          dlfp=DLFP), workload(), async_depth=depth)
    assert max(per_step(on, "long0")) <= CAP < max(per_step(off, "long0"))


def test_step_records_and_shared_config_untouched(tmp_path) -> None:
    from dlfp.control.steplog import read_step_log

    log = tmp_path / "steps.jsonl"
    s = make_scheduler(DLFPScheduler, async_scheduling=True, dlfp={**DLFP, "step_log": str(log)})
    base = s.vllm_config.scheduler_config.long_prefill_token_threshold
    outputs = run_to_completion(s, workload(), async_depth=2)
    assert s.vllm_config.scheduler_config.long_prefill_token_threshold == base
    s.shutdown()
    [(header, rows)] = list(read_step_log(log))
    assert header["scheduler"] == "DLFPAsyncScheduler" and header["async_scheduling"]
    assert len(rows) == len(outputs)
    assert all(r["complete_t"] >= r["schedule_t"] for r in rows)
    mixed = [r for r in rows if r["prefill_tokens"] and r["decode_reqs"]]
    assert mixed and all(r["cap"] == CAP and r["prefill_tokens"] <= CAP for r in mixed)
    assert sum(r["prefill_tokens"] for r in rows) == 8 * 32 + 2 * 2000
    assert all(r["total_tokens"] == o.total_num_scheduled_tokens for r, o in zip(rows, outputs, strict=True))


@pytest.mark.parametrize(("dlfp", "needle"), [({"gain": 5}, "'gain' = 5"), ({"gian": 1}, "gian")])
def test_bad_config_stops_start_up(dlfp: dict, needle: str) -> None:
    with pytest.raises(DLFPConfigError, match=needle):
        make_scheduler(DLFPScheduler, async_scheduling=False, dlfp=dlfp)


def test_decodes_finishing_under_async_do_not_leak_budget_to_prefill() -> None:
    """Async vLLM skips a decode whose in-flight tokens reach max_tokens; its token of budget
    must not go to prefill (found with the modeled executor: prefill was cap + 1)."""
    s = make_scheduler(DLFPScheduler, async_scheduling=True, dlfp=DLFP)
    arrivals = {0: [make_request(f"d{i}", 32, 3 + i) for i in range(16)],
                2: [make_request("long0", 3000, 2), make_request("long1", 3000, 2)]}
    outputs = run_to_completion(s, arrivals, async_depth=2)
    mixed = []
    for o in outputs:
        prefill = o.num_scheduled_tokens.get("long0", 0) + o.num_scheduled_tokens.get("long1", 0)
        decoding = [r for r in o.num_scheduled_tokens if r.startswith("d") and o.num_scheduled_tokens[r] == 1]
        if decoding and prefill > 2:
            mixed.append((prefill, len(decoding)))
    assert mixed, "no step mixed the long prefills with decodes: the scenario did not test the cap"
    assert all(prefill <= CAP for prefill, _ in mixed), mixed


@pytest.mark.parametrize("anti_windup", [False, True])
def test_anti_windup_holds_the_chunk_through_short_prompts(anti_windup: bool) -> None:
    """Fast mixed steps whose prefill is a short prompt grow the paper's chunk, not the held one."""
    dlfp = {"chunk_min": 32, "chunk_init": 256, "chunk_max": 2048, "anti_windup": anti_windup}
    s = make_scheduler(DLFPScheduler, async_scheduling=False, dlfp=dlfp)
    arrivals = {0: [make_request(f"d{i}", 32, 80) for i in range(8)]}
    arrivals.update({k: [make_request(f"s{k}", 40, 2)] for k in range(2, 30)})  # direct drive: ~0 s steps
    arrivals[40] = [make_request("long", 2000, 2)]
    outputs = run_to_completion(s, arrivals, async_depth=1)
    first_chunk = next(n for n in per_step(outputs, "long") if n)
    assert first_chunk == (256 if anti_windup else 2000)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_pressure_threshold_caps_only_when_enough_requests_decode(async_scheduling: bool) -> None:
    """The P-PAS-style two-level switch: with ``pressure_decodes`` 4, two decoding requests do not
    trigger the cap (the long prompt goes in whole), eight do."""
    depth = 2 if async_scheduling else 1
    few = {0: [make_request(f"d{i}", 32, 60) for i in range(2)], 5: [make_request("long", 2000, 2)]}
    many = {0: workload()[0], 5: [make_request("long", 2000, 2)]}
    params = {**DLFP, "pressure_decodes": 4}
    low = run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp=params),
                            few, async_depth=depth)
    high = run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp=params),
                             many, async_depth=depth)
    assert max(per_step(low, "long")) == 2000
    assert max(per_step(high, "long")) <= CAP


def test_target_from_the_decode_step_is_measured_online() -> None:
    """``target: decode``: once decode-only steps have completed, T* is a multiple of their cadence
    (recorded per step), not the SLO's."""
    s = make_scheduler(DLFPScheduler, async_scheduling=False,
                       dlfp={"target": "decode", "target_decode_steps": 3.0, "itl_slo_ms": 100.0})
    run_to_completion(s, workload(), async_depth=1)
    measured = s._tracker.decode_step_s
    assert measured is not None and measured > 0
    assert s._target_s() == pytest.approx(3.0 * measured)
    assert s._target_s() != s.dlfp_params.target_interval_s


def drive_stamped(s: Any, arrivals: dict[int, list], stamp_of: Any) -> list[SchedulerOutput]:
    """The synchronous engine loop of ``run_to_completion``, with a stamp put on each step's output the
    way ``dlfp.vllm.completion_stamps`` does, by ``stamp_of(index, output)`` (None: leave it unstamped)."""
    from dlfp.vllm.completion_stamps import stamp
    from dlfp.vllm.direct import fabricate_output

    outputs: list[SchedulerOutput] = []
    for i in range(100000):
        for r in arrivals.pop(i, ()):
            s.add_request(r)
        if not (arrivals or s.has_requests()):
            return outputs
        out = s.schedule()
        outputs.append(out)
        produced = fabricate_output(s, out)
        t = stamp_of(len(outputs) - 1, out)
        if t is not None:
            stamp(out, t)
        s.update_from_output(out, produced)
    raise RuntimeError("unfinished")


@pytest.mark.parametrize("stamped", [True, False])
def test_the_completion_signal_runs_on_the_executors_stamps(tmp_path, stamped: bool) -> None:
    """Each step's stamp (taken just before the output is handed back, as the stamped executors do)
    is what the completion signal's cadence is made of, and the log says so per step; an unstamped
    executor (stock, or the CPU engine without stamps) falls back to the collect time."""
    from dlfp.control.steplog import read_step_log

    log = tmp_path / "steps.jsonl"
    s = make_scheduler(DLFPScheduler, async_scheduling=False,
                       dlfp={**DLFP, "signal": "completion", "step_log": str(log)})
    stamps: list[float] = []

    def stamp_of(i: int, out: SchedulerOutput) -> float | None:
        if not stamped or i == 7:  # step 7: a step whose stamp is missing
            stamps.append(math.nan)
            return None
        stamps.append(time.monotonic())
        return stamps[-1]

    drive_stamped(s, workload(), stamp_of)
    s.shutdown()
    [(_, rows)] = list(read_step_log(log))
    sources = [r["complete_source"] for r in rows]
    if stamped:
        assert sources[7] == COLLECT and set(sources[:7] + sources[8:]) == {EXEC_DONE}
        assert all(r["exec_done_t"] == t for r, t in zip(rows, stamps, strict=True) if not math.isnan(t))
    else:
        assert set(sources) == {COLLECT} and all(r["exec_done_t"] is None for r in rows)
    done = [r["exec_done_t"] if r["complete_source"] == EXEC_DONE else r["complete_t"] for r in rows]
    # The signal at call j is the cadence of step j-1 (sync: completed before call j): c_(j-1) - c_(j-2).
    fed = [(r["signal_s"], done[j - 1] - done[j - 2]) for j, r in enumerate(rows) if j >= 2]
    assert fed and all(got == pytest.approx(want, abs=1e-12) for got, want in fed)
    if stamped:  # the stamps really differ from the collect times, so the check above tells them apart
        assert all(r["exec_done_t"] < r["complete_t"] for r in rows if r["exec_done_t"] is not None)


def test_a_stale_stamp_is_not_fed_to_the_controller() -> None:
    """A stamp before its step was scheduled (a mispaired or reused one) gives way to the collect time."""
    s = make_scheduler(DLFPScheduler, async_scheduling=False, dlfp={**DLFP, "signal": "completion"})
    drive_stamped(s, workload(), lambda i, out: 0.0)
    assert s._tracker._last_completed.complete_source == COLLECT
    assert s._tracker._cadence is not None and s._tracker._cadence > 0


def test_the_step_log_names_the_executor_as_configured() -> None:
    """What ran is recorded (issue 19): a class by its qualified name, a name or path as given."""
    from dlfp.vllm.executors import TimedUniProcExecutor
    from dlfp.vllm.scheduler import executor_name

    assert executor_name(TimedUniProcExecutor) == "dlfp.vllm.executors.TimedUniProcExecutor"
    assert executor_name("mp") == "mp" and executor_name("dlfp.sim.executor.ModeledExecutor") == \
        "dlfp.sim.executor.ModeledExecutor"
    assert executor_name(None) == "default"



CADENCE = {"enabled": False, "prefill_every": 4}


def cadence_arrivals() -> dict[int, list]:
    """A prompt alone, then eight decoding requests, then two 2000-token prompts on consecutive steps
    (of two consecutive steps at most one is a cadence step: at least one prompt waits)."""
    return {0: [make_request("solo", 2000, 2)], 10: workload()[0],
            30: [make_request("long0", 2000, 2)], 31: [make_request("long1", 2000, 2)]}


def prompt_chunks(outputs: list, rid: str) -> list[int]:
    """The request's prefill chunks, in order (its decode steps schedule one token each)."""
    return [n for n in per_step(outputs, rid) if n > 1]


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("budget", [4096, 1024])
def test_prefill_cadence_admits_prefill_beside_decodes_only_on_every_nth_step(
        tmp_path, async_scheduling: bool, budget: int) -> None:
    """``prefill_every`` 4 with control off (issue 20's cadence baseline): while decodes run, prefill
    tokens appear only on steps 0, 4, 8, ... and get what stock would give them (rarer, not smaller
    chunks); with no decodes running there is no cadence. At budget 1024 the cadence step cannot admit
    both prompts, which turns vLLM's own deferral off (capacity-bound); the cadence must hold anyway."""
    from dlfp.control.steplog import read_step_log

    depth = 2 if async_scheduling else 1
    stock = run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp={"enabled": False},
                                             max_num_batched_tokens=budget), cadence_arrivals(), async_depth=depth)
    log = tmp_path / "steps.jsonl"
    s = make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp={**CADENCE, "step_log": str(log)},
                       max_num_batched_tokens=budget)
    arrivals = cadence_arrivals()
    outputs = run_to_completion(s, arrivals, async_depth=depth)
    s.shutdown()
    [(header, rows)] = list(read_step_log(log))
    assert header["params"]["prefill_every"] == 4 and header["params"]["enabled"] is False
    assert [r["step"] for r in rows] == list(range(len(outputs)))

    solo = prompt_chunks(outputs, "solo")  # alone: its prompt as stock schedules it, on consecutive steps
    assert solo == prompt_chunks(stock, "solo") == ([2000] if budget == 4096 else [1024, 976])
    assert per_step(outputs, "solo")[:len(solo)] == solo
    for rid in ("long0", "long1"):
        assert sum(prompt_chunks(outputs, rid)) == 2000
        assert all(step % 4 == 0 for step, n in enumerate(per_step(outputs, rid)) if n > 1)
    mixed = [r for r in rows if r["prefill_tokens"] and r["decode_reqs"]]
    assert mixed and all(r["step"] % 4 == 0 for r in mixed)
    if budget == 4096:  # the budget does not bind: each prompt goes in whole, as with stock
        assert prompt_chunks(outputs, "long0") == prompt_chunks(stock, "long0") == [2000]
        assert prompt_chunks(outputs, "long1") == prompt_chunks(stock, "long1") == [2000]
    else:  # it binds: every mixed step but the last is as full as stock's, chunks as many as stock's
        assert all(r["total_tokens"] == budget for r in mixed[:-1]) and len(mixed) >= 4
        assert [len(prompt_chunks(outputs, r)) for r in ("long0", "long1")] == [
            len(prompt_chunks(stock, r)) for r in ("long0", "long1")]
    deferred = [r for r in rows if r["deferred"]]
    assert deferred and all(r["step"] % 4 and r["decode_reqs"] and not r["prefill_tokens"] for r in deferred)
    assert not any(r["deferred"] for r in rows if r["step"] % 4 == 0 or not r["decode_reqs"])
    if budget == 1024:  # long1 waits behind long0's chunks: three deferred steps after each cadence step
        assert len(deferred) >= 9
    for r in (r for reqs in arrivals.values() for r in reqs):  # every request completes, whole
        assert r.is_finished() and r.num_output_tokens == r.max_tokens
        assert sum(per_step(outputs, r.request_id)) == r.num_prompt_tokens + r.max_tokens - 1
    assert sum(r["prefill_tokens"] for r in rows) == 8 * 32 + 3 * 2000


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_prefill_cadence_with_a_fixed_cap_caps_the_rarer_chunks(async_scheduling: bool) -> None:
    """The cadence combined with the fixed cap on mixed steps (arm ``cadence-4-cap``): the long prompt's
    chunks beside decodes are capped and come only on cadence steps; decodes keep a token every step."""
    s = make_scheduler(DLFPScheduler, async_scheduling=async_scheduling, dlfp={**DLFP, "prefill_every": 4})
    outputs = run_to_completion(s, {0: workload()[0], 5: [make_request("long", 2000, 2)]},
                                async_depth=2 if async_scheduling else 1)
    beside = [(i, o.num_scheduled_tokens["long"]) for i, o in enumerate(outputs)
              if o.num_scheduled_tokens.get("long", 0) > 1 and o.num_scheduled_tokens.get("d0")]
    assert len(beside) >= 8 and all(i % 4 == 0 and n <= CAP for i, n in beside)
    assert sum(prompt_chunks(outputs, "long")) == 2000
    steps_d0 = [i for i, n in enumerate(per_step(outputs, "d0")) if n]
    assert steps_d0 == list(range(len(steps_d0)))  # no decode step skipped


def test_a_request_reused_from_an_earlier_run_is_refused_by_the_rig() -> None:
    """The rig's guard (the cause of an 'Invalid request status: FINISHED_LENGTH_CAPPED' deep in vLLM):
    a finished request fed to a second scheduler is refused up front, naming it."""
    arrivals = {0: [make_request("once", 64, 2)]}
    run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=False), arrivals, async_depth=1)
    with pytest.raises(ValueError, match="'once' was already scheduled"):
        run_to_completion(make_scheduler(DLFPScheduler, async_scheduling=False), arrivals, async_depth=1)


class _PlantClock:
    """The scheduler's clock (``DLFPScheduler.clock``, set on the instance as the virtual-time driver
    sets it): a test advances it by each step's cost."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def plant_s(decodes: int, context: int, prefill: int) -> float:
    """A synthetic step cost: 2 ms a step, 0.25 ms a decode, 1 us a cached token, 40 us a prefill token."""
    return 1e-3 * (2.0 + 0.25 * decodes + 1e-3 * context + 0.04 * prefill)


SLO_MS = 20.0


def test_the_slo_controller_fits_the_step_cost_and_holds_the_slo(tmp_path) -> None:
    """``controller: slo`` in the real scheduler: each step's batch sums reach the controller, each
    completed step reaches its fit (on the completion time), and once warm the mixed steps are sized
    so that the decode gaps stay under the SLO while prefill gets what the SLO leaves."""
    from dlfp.control.steplog import read_step_log
    from dlfp.vllm.direct import fabricate_output

    clock = _PlantClock()
    log = tmp_path / "steps.jsonl"
    s = make_scheduler(DLFPScheduler, async_scheduling=False,
                       dlfp={"controller": "slo", "itl_slo_ms": SLO_MS, "step_log": str(log)})
    s.clock = clock
    arrivals = {0: [make_request(f"d{i}", 32, 400) for i in range(8)],
                **{5 + 60 * k: [make_request(f"long{k}", 2000, 2)] for k in range(6)}}
    for _ in range(100000):
        step = s._step
        for r in arrivals.pop(step, ()):
            s.add_request(r)
        if not (arrivals or s.has_requests()):
            break
        out = s.schedule()
        produced = fabricate_output(s, out)
        record = s._inflight[id(out)]
        clock.t += plant_s(record.decode_reqs, record.decode_context, record.prefill_tokens)
        s.update_from_output(out, produced)
    s.shutdown()
    [(_, records)] = list(read_step_log(log))
    rows = spread_controller_fields(records)  # the controller's own fields, as the step table has them
    fit = s.dlfp_controller
    assert fit.model.warm and fit.model.rel_error < 0.01  # an exact plant is learnt exactly
    # The batch sums: between two decode-only steps of the same eight decoders, each adds one token.
    steady = [(a, b) for a, b in itertools.pairwise(rows)
              if a["decode_reqs"] == b["decode_reqs"] == 8 and a["prefill_tokens"] == b["prefill_tokens"] == 0]
    assert steady and all(b["decode_context"] - a["decode_context"] == 8 for a, b in steady)
    warm = [r for r in rows if r["budget_s"] is not None and r["prefill_tokens"] > 0 and r["decode_reqs"] > 0]
    assert len(warm) > 20 and not any(r["infeasible"] for r in warm)
    actual = [plant_s(r["decode_reqs"], r["decode_context"], r["prefill_tokens"]) for r in warm]
    assert max(actual) <= SLO_MS / 1000  # every sized mixed step is under the SLO
    for r, a in zip(warm, actual, strict=True):  # and the fit's prediction of it is right
        assert r["predicted_s"] == pytest.approx(a, rel=0.02) or r["prefill_tokens"] < r["cap"]
    # The slack goes to prefill: a chunk the SLO allows, not the cold start's 128.
    oracle = (0.95 * SLO_MS - 2.0 - 0.25 * 8 - 1e-3 * 8 * 300) / 0.04
    assert sorted(r["cap"] for r in warm)[len(warm) // 2] >= 0.8 * oracle


def test_the_slo_controller_says_so_when_no_chunk_meets_the_slo() -> None:
    """An SLO under the decode floor: every warm mixed step is marked infeasible and gets chunk_min."""
    from dlfp.vllm.direct import fabricate_output

    clock = _PlantClock()
    s = make_scheduler(DLFPScheduler, async_scheduling=False, dlfp={"controller": "slo", "itl_slo_ms": 3.0})
    s.clock = clock
    arrivals = {0: [make_request(f"d{i}", 32, 200) for i in range(8)],
                **{5 + 40 * k: [make_request(f"long{k}", 1000, 2)] for k in range(4)}}
    records = []
    for _ in range(100000):
        for r in arrivals.pop(s._step, ()):
            s.add_request(r)
        if not (arrivals or s.has_requests()):
            break
        out = s.schedule()
        produced = fabricate_output(s, out)
        records.append(s._inflight[id(out)])
        clock.t += plant_s(records[-1].decode_reqs, records[-1].decode_context, records[-1].prefill_tokens)
        s.update_from_output(out, produced)
    warm = [r for r in records if r.controller["budget_s"] is not None]
    assert warm and all(r.controller["infeasible"] and r.cap == 32 for r in warm)


@pytest.mark.parametrize("controller", ["law", "slo"])
def test_an_idle_reset_starts_control_over_with_a_new_step_log_segment(tmp_path, controller: str) -> None:
    """``reset_prefix_cache`` on an idle engine (how the harness reuses one for another workload) gives
    the next workload a fresh controller, tracker and step count, and its own step-log segment; the
    second workload then schedules exactly as the first did on a fresh scheduler."""
    from dlfp.control.steplog import read_step_log

    log = tmp_path / "steps.jsonl"
    fixed = DLFP if controller == "law" else {}  # a fixed cap: the law's steps do not depend on timing
    s = make_scheduler(DLFPScheduler, async_scheduling=False,
                       dlfp={**fixed, "controller": controller, "itl_slo_ms": 20.0, "step_log": str(log)})
    first = run_to_completion(s, workload(), async_depth=1)
    assert s._step == len(first) and s.reset_prefix_cache()
    assert s._step == 0 and s._tracker._last_completed is None
    assert s.dlfp_controller.chunk == (s.dlfp_params.chunk_init if controller == "law" else 128)
    second = run_to_completion(s, workload(), async_depth=1)
    s.shutdown()
    segments = list(read_step_log(log))
    assert [h["segment"] for h, _ in segments] == [0, 1]
    assert [len(rows) for _, rows in segments] == [len(first), len(second)]
    assert [r["step"] for r in segments[1][1]] == list(range(len(second)))
    if controller == "law":
        assert [o.num_scheduled_tokens for o in first] == [o.num_scheduled_tokens for o in second]


def test_a_reset_while_requests_run_leaves_control_alone() -> None:
    s = make_scheduler(DLFPScheduler, async_scheduling=False, dlfp=DLFP)
    for r in workload()[0]:
        s.add_request(r)
    s.schedule()
    step = s._step
    s.reset_prefix_cache()
    assert s._step == step == 1


def test_a_scheduler_refuses_another_vllm_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The glue reads vLLM's internals: on another release line it refuses to start, naming both."""
    from dlfp.vllm import version

    monkeypatch.setattr(version, "ORIGINAL_VERSION", lambda name: "0.33.0" if name == "vllm" else "0")
    with pytest.raises(version.UnsupportedVLLM, match=r"vLLM 0\.32\.x, and this is vLLM 0\.33\.0"):
        make_scheduler(DLFPScheduler, async_scheduling=False, dlfp=DLFP)
