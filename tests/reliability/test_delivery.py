"""Every result is delivered, whatever user code does: callbacks that raise anything, block, wait on other
handles or close the runtime; close() with a short timeout; async consumers that go away."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from conftest import wait_idle
from holds import Hold
from v2.runtime import Runtime

BOUND = 60.0  # seconds: generous for a 2-core CI machine; a lost result would wait forever


def _runtime() -> Runtime:
    return Runtime.from_card("moss_tts_local_tiny", device="cpu")


@pytest.fixture(scope="module")
def runtime():
    rt = _runtime()
    yield rt
    rt.close()


def _req(seed: int, frames: int = 12, stream: bool = False) -> dict:
    return {"text": "deliver me", "seed": seed, "max_frames": frames, "min_frames": frames, "stream": stream}


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, GeneratorExit, RuntimeError])
def test_a_done_callback_raising_anything_loses_no_result(runtime, exc):
    handles = runtime.submit_many([_req(s) for s in range(3)])

    def boom(_result):
        raise exc("from a callback")

    for h in handles:
        h.on_done(boom)
    assert all(h.result(BOUND).finish_reason == "length" for h in handles)
    later = runtime.submit(_req(9))  # the callback thread survived: a later callback still runs
    seen = threading.Event()
    later.on_done(lambda _r: seen.set())
    assert later.result(BOUND).finish_reason == "length" and seen.wait(BOUND)
    assert any(exc.__name__ in e for e in handles[0].callback_errors)


def test_callbacks_that_block_forever_or_wait_on_other_handles_delay_no_result(runtime):
    release = threading.Event()
    first, second, third = runtime.submit_many([_req(1), _req(2, frames=20), _req(3)])
    first.on_done(lambda _r: release.wait())               # blocks the callback thread "forever"
    second.on_done(lambda _r: third.result(BOUND))          # waits on another handle's result
    third.on_done(lambda _r: second.result(BOUND))
    try:
        for h in (first, second, third):
            assert h.result(BOUND).finish_reason == "length"
        assert runtime.submit(_req(4)).result(BOUND).finish_reason == "length"  # the engine is not held
    finally:
        release.set()


def test_a_subscriber_raising_keyboard_interrupt_or_blocking_loses_nothing(runtime):
    release = threading.Event()
    loud, stuck = runtime.submit_many([_req(5, stream=True), _req(6, stream=True)])

    def interrupt(_chunk):
        raise KeyboardInterrupt

    loud.subscribe(interrupt)
    stuck.subscribe(lambda _chunk: release.wait())
    try:
        assert loud.result(BOUND).finish_reason == "length"
        assert stuck.result(BOUND).finish_reason == "length"
        assert "KeyboardInterrupt: " in loud.callback_errors
    finally:
        release.set()


def test_close_with_a_tiny_timeout_while_streaming_still_delivers_every_result(monkeypatch):
    rt = _runtime()
    # and the frames are held at the 10th (past the first chunk) until the check below: no request can end
    # before close() returns however fast the host is
    frames = Hold(rt.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10, timeout=BOUND)
    apply_cancels = rt.engine.requests.apply_cancels
    closing, release = threading.Event(), threading.Event()

    def held_cancels() -> None:  # the engine is mid-step when close() is called, as on a loaded device
        if closing.is_set():
            release.wait(BOUND)  # held until the check below, however slow this machine is
        apply_cancels()

    rt.engine.requests.apply_cancels = held_cancels
    handles = rt.submit_many([_req(s, frames=200, stream=True) for s in range(4)])
    for h in handles:
        h.subscribe(lambda _c: None)
    next(iter(handles[0]))  # streaming is under way
    frames.wait()
    closing.set()
    try:
        rt.close(timeout=0.01)
        assert not any(h.done for h in handles)  # close() returned before the engine ended them
    finally:
        release.set()
        frames.release()
    results = [h.result(BOUND) for h in handles]
    assert {r.finish_reason for r in results} <= {"abort", "length"}
    assert rt.stats()["kv_slots_in_use"] == rt.stats()["codec_slots_in_use"] == 0


@pytest.mark.parametrize("where", ["done", "subscriber"])
def test_close_works_from_inside_a_callback(where):
    rt = _runtime()
    outcome: list[str] = []

    def close(_arg):
        try:
            rt.close()
            outcome.append("closed")
        except BaseException as e:  # noqa: BLE001
            outcome.append(f"{type(e).__name__}: {e}")

    first, other = rt.submit_many([_req(7, frames=6, stream=True), _req(8, frames=400)])
    (first.on_done if where == "done" else first.subscribe)(close)
    assert other.result(BOUND).finish_reason in ("abort", "length")
    deadline = time.time() + BOUND
    while not outcome and time.time() < deadline:
        time.sleep(0.01)
    assert outcome == ["closed"] and first.result(BOUND).finish_reason in ("length", "abort")
    assert not rt.engine.thread.is_alive()


def test_a_cancelled_async_consumer_cancels_its_request_and_frees_its_slots(runtime, monkeypatch):
    # its frames are held at the 10th (past the first chunk) until the consumer is cancelled: the request cannot
    # end first however fast the host is
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10, timeout=BOUND)

    async def consume(handle, started):
        async for _chunk in handle:
            started.set()

    async def main():
        handle = runtime.submit(_req(11, frames=400, stream=True))
        started = asyncio.Event()
        task = asyncio.create_task(consume(handle, started))
        await asyncio.wait_for(started.wait(), BOUND)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # its iterator's end has posted the cancel
        return handle

    try:
        handle = asyncio.run(main())
    finally:
        hold.release()
    assert handle.result(BOUND).finish_reason == "abort"
    wait_idle(runtime)


def test_a_closed_async_iterator_cancels_its_request(runtime, monkeypatch):
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10, timeout=BOUND)

    async def main():
        handle = runtime.submit(_req(12, frames=400, stream=True))
        chunks = handle.__aiter__()
        await asyncio.wait_for(chunks.__anext__(), BOUND)
        await chunks.aclose()  # posts the cancel while its frames are held at the 10th
        return handle

    try:
        handle = asyncio.run(main())
    finally:
        hold.release()
    assert handle.result(BOUND).finish_reason == "abort"
    wait_idle(runtime)


def test_a_closed_event_loop_prints_nothing_from_background_threads(runtime, capfd):
    loop = asyncio.new_event_loop()
    handle = runtime.submit(_req(13, frames=60, stream=True))
    chunks = handle.__aiter__()
    loop.run_until_complete(asyncio.wait_for(chunks.__anext__(), BOUND))
    loop.close()  # abandoned mid-stream, its async generator never closed
    assert handle.result(BOUND).finish_reason == "length"
    time.sleep(0.2)  # the subscriber's thread has posted its last chunks and its end by now
    assert "Event loop is closed" not in capfd.readouterr().err
