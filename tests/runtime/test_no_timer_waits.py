"""The device is never waited on by a timer (ARCHITECTURE property 12): while steps run on the simulated
asynchronous device, the engine thread waits for a step's results, never asleep on its idle timeout; and the
engine bench's step-timestamp wrapper hands the step's result back (the engine sleeps after a step that says
it did nothing, so a wrapper that drops it made the bench's period D + the idle timeout)."""

from __future__ import annotations

import threading

import pytest

from v2.bench.engine import step_starts
from v2.bench.overhead import instant_experts, one_row_requests
from v2.runtime import Runtime
from v2.runtime.device import SimulatedStream


@pytest.fixture()
def rt():
    runtime = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.005))
    yield runtime
    runtime.close()


def timed_sleeps(rt: Runtime) -> list[float]:
    """Record every timed wait of the engine thread on its condition (the idle sleep) while inside."""
    engine, sleeps = rt.engine, []
    real = engine.cond.wait

    def wait(timeout=None):
        if timeout is not None and threading.current_thread() is engine.thread:
            sleeps.append(timeout)
        return real(timeout)

    engine.cond.wait = wait
    return sleeps


def test_the_engine_never_sleeps_on_a_timer_while_requests_decode_on_the_device(rt):
    sleeps = timed_sleeps(rt)
    with instant_experts(rt):
        for h in rt.submit_many(one_row_requests(rt, 64, frames=20)):
            assert h.result(60).finish_reason == "length"
    assert sleeps == []
    assert rt.stats()["steps"] >= 20


def test_the_bench_wrapper_passes_the_steps_result_through(rt):
    sleeps = timed_sleeps(rt)
    with instant_experts(rt), step_starts(rt) as stamps:
        for h in rt.submit_many(one_row_requests(rt, 16, frames=12)):
            h.result(60)
    assert len(stamps) >= 12 and sleeps == []
