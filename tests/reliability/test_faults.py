"""Faults stay inside the requests they touch; every request ends exactly once; nothing leaks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.card import load_card
from v2.contracts import WorkUnitKind
from v2.errors import OverloadedError
from v2.runtime import Runtime
from v2.runtime.handles import SpeechHandle

from conftest import doom_requests, wait_idle


def make_runtime(**ar) -> Runtime:
    card = load_card("moss_tts_local_tiny")
    loops = card.loops.model_copy(update={"ar_decode": card.loops.ar_decode.model_copy(update=ar)})
    return Runtime.from_card(card.model_copy(update={"loops": loops}), device="cpu")


@pytest.fixture(scope="module")
def rt():
    runtime = make_runtime()
    yield runtime
    runtime.close()


def test_an_exception_in_one_requests_loop_code_fails_only_that_request(rt, monkeypatch):
    real = rt.family.ar_loop.advance
    victims: set[int] = set()

    def advance(state, plan, row):
        if state.request_id in victims and state.codes:
            raise ValueError("loop bug")
        return real(state, plan, row)

    monkeypatch.setattr(rt.family.ar_loop, "advance", advance)
    handles = rt.submit_many([{"text": f"r{i}", "seed": i, "max_frames": 12, "min_frames": 12, "stream": True}
                              for i in range(4)])
    victims.add(handles[1].request_id)
    results = [h.result(60) for h in handles]
    assert results[1].finish_reason == "error" and "ValueError: loop bug" in results[1].error
    assert [r.finish_reason for r in results[:1] + results[2:]] == ["length"] * 3
    wait_idle(rt)


def test_a_slow_subscriber_never_stalls_the_engine_and_its_request_is_aborted(monkeypatch):
    with make_runtime(max_buffered_chunks=2) as runtime:
        # the reader's frames wait until it is subscribed and has taken every chunk delivered so far: it is
        # never behind because the host makes frames fast or its thread is slow; a reader whose chunks queue
        # behind the blocked one never catches up, falls behind after the wait, and is aborted (the check fails)
        known: set[int] = set()
        seen: list = []
        box: dict = {}
        real = runtime.family.ar_loop.advance

        def advance(state, plan, row):
            if known and state.request_id not in known and "late" not in box:  # the reader (submitted after)
                deadline = time.monotonic() + 30
                while "reader" not in box or len(seen) < len(box["reader"]._chunks):
                    if time.monotonic() > deadline:
                        box["late"] = True  # it never caught up: waited for no more
                        break
                    time.sleep(0.001)
            return real(state, plan, row)

        monkeypatch.setattr(runtime.family.ar_loop, "advance", advance)
        release = threading.Event()
        slow = runtime.submit({"text": "slow reader", "max_frames": 200, "min_frames": 200, "stream": True})
        slow.subscribe(lambda chunk: release.wait(30))  # a consumer that stops reading
        fast = [runtime.submit({"text": f"fast {i}", "seed": i, "max_frames": 40, "min_frames": 40}) for i in range(3)]
        known.update(h.request_id for h in (slow, *fast))
        reader = runtime.submit({"text": "a reader that keeps up", "max_frames": 60, "min_frames": 60, "stream": True})
        reader.subscribe(seen.append)
        box["reader"] = reader
        assert all(h.result(60).finish_reason == "length" for h in fast)  # the engine kept going
        assert reader.result(60).finish_reason == "length"  # other subscribers are not held up by the slow one
        deadline = time.time() + 10
        while len(seen) < len(list(reader)) and time.time() < deadline:
            time.sleep(0.01)
        assert [c.seq for c in seen] == list(range(len(list(reader))))
        result = slow.result(60)
        assert result.finish_reason == "abort" and "fell more than 2 chunks behind" in result.error
        release.set()
        wait_idle(runtime)


def test_deadlines_end_waiting_and_running_requests(monkeypatch):
    with make_runtime(max_running=1) as runtime:
        real = runtime.family.ar_loop.advance

        def advance(state, plan, row):  # each frame takes at least 20 ms however fast the host is
            time.sleep(0.02)
            return real(state, plan, row)

        monkeypatch.setattr(runtime.family.ar_loop, "advance", advance)
        # 3 s: the first frame comes well within it on a loaded machine; 600 frames (>= 12 s) do not
        running = runtime.submit({"text": "long", "max_frames": 600, "min_frames": 600, "timeout": 3.0})
        waiting = runtime.submit({"text": "queued", "max_frames": 5, "timeout": 0.3})
        for h in (running, waiting):
            r = h.result(60)
            assert r.finish_reason == "abort" and r.error.startswith("timeout:")
        assert len(waiting.result().codes) == 0 and 0 < len(running.result().codes) < 600
        wait_idle(runtime)


def test_a_full_waiting_queue_refuses_with_a_clear_overload_error(monkeypatch):
    with make_runtime(max_running=1, max_waiting=2) as runtime:
        # the first request's frames are held until the test has filled the queue: it holds the one slot however
        # fast the host makes frames
        running, release = threading.Event(), threading.Event()
        real = runtime.family.ar_loop.advance

        def advance(state, plan, row):
            taken = real(state, plan, row)
            if not release.is_set():
                running.set()
                release.wait(60)
            return taken

        monkeypatch.setattr(runtime.family.ar_loop, "advance", advance)
        first = runtime.submit({"text": "a", "max_frames": 300, "min_frames": 300})
        try:
            assert running.wait(120), runtime.stats()  # a hang check
            assert runtime.stats()["running"] == 1
            queued = [runtime.submit({"text": "b", "max_frames": 2}) for _ in range(2)]
            with pytest.raises(OverloadedError,
                               match=r"queue: 2 requests are already waiting for a slot \(max_waiting 2\)"):
                runtime.submit({"text": "c", "max_frames": 2})
            assert runtime.stats()["waiting"] == 2
            first.cancel()
        finally:
            release.set()
        assert first.result(30).finish_reason == "abort"
        assert all(h.result(30).finish_reason in ("stop", "length") for h in queued)
        wait_idle(runtime)


def test_cancel_mid_prefill_mid_frame_and_mid_chunk(monkeypatch):
    with make_runtime(prefill_chunk_rows=16) as runtime:
        # each phase holds the engine at its point (a prefill chunk launched, frames made, a chunk delivered) until
        # the cancel is posted, so the request cannot get past that point first however fast the host is
        at, release = threading.Event(), threading.Event()
        prefill = runtime.engine.executors[WorkUnitKind.PREFILL]
        real_launch, real_advance = prefill.launch, runtime.family.ar_loop.advance
        hold: dict[str, int] = {}  # the phase held: "prefill", or "frames" a request makes before it is held

        def launch(work):
            out = real_launch(work)
            if hold.get("prefill") is not None and not release.is_set():
                at.set()
                release.wait(60)
            return out

        def advance(state, plan, row):
            taken = real_advance(state, plan, row)
            if "frames" in hold and len(state.codes) >= hold["frames"] and not release.is_set():
                at.set()
                release.wait(60)
            return taken

        def cancel_when_held(handle) -> None:
            try:
                assert at.wait(120), runtime.stats()  # a hang check
                handle.cancel()
            finally:
                release.set()

        monkeypatch.setattr(prefill, "launch", launch)
        monkeypatch.setattr(runtime.family.ar_loop, "advance", advance)
        prompt = {"text": "a long prompt " * 50, "max_frames": 50, "min_frames": 50, "stream": True}  # ~55 chunks
        hold["prefill"] = 1
        mid_prefill = runtime.submit(prompt)
        cancel_when_held(mid_prefill)  # its first prompt chunk has been run, ~54 are still to come
        r = mid_prefill.result(30)
        assert r.finish_reason == "abort" and len(r.codes) == 0
        assert 16 <= runtime.stats()["prefilled_rows"] < 160  # a few of its ~55 chunks
        del hold["prefill"]
        at.clear(), release.clear()
        hold["frames"] = 5  # one request at a time runs here: set before it is submitted
        mid_frame = runtime.submit({**prompt, "text": "short"})
        cancel_when_held(mid_frame)  # 5 frames made, 45 still to come
        r = mid_frame.result(30)
        assert r.finish_reason == "abort" and 5 <= len(r.codes) < 50
        at.clear(), release.clear()
        hold["frames"] = 20  # the first chunk (3 frames) is delivered long before
        mid_chunk = runtime.submit({**prompt, "text": "short"})
        it = iter(mid_chunk)
        next(it)  # a chunk has been made; more are to come
        cancel_when_held(mid_chunk)
        r = mid_chunk.result(30)
        assert r.finish_reason == "abort" and len(r.codes) < 50
        wait_idle(runtime)


@pytest.fixture(scope="module")
def small():
    runtime = make_runtime(max_running=3, max_waiting=64)
    yield runtime
    runtime.close()


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 3), st.integers(1, 12), st.booleans()),
    st.tuples(st.just("clone"), st.floats(0.1, 2.5), st.integers(1, 6)),  # a reference recording to encode first
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("fail"), st.integers(0, 20)),
    st.tuples(st.just("update"), st.sampled_from(["wait", "abort"])),
    st.tuples(st.just("pause"), st.floats(0, 0.05)),
), min_size=1, max_size=10)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_invariants_over_random_sequences(small, monkeypatch, ops):
    finished: dict[int, int] = {}
    real_finish = SpeechHandle.finish

    def counting_finish(self, result):
        finished[self.request_id] = finished.get(self.request_id, 0) + 1
        return real_finish(self, result)

    monkeypatch.setattr(SpeechHandle, "finish", counting_finish)
    doomed = doom_requests(small, monkeypatch)
    handles = []
    version = small.weight_version
    for op in ops:
        if op[0] == "submit":
            _, count, frames, stream = op
            handles += small.submit_many([{"text": f"op {len(handles) + i}", "seed": len(handles) + i,
                                           "max_frames": frames, "stream": stream} for i in range(count)])
        elif op[0] == "clone":
            _, seconds, frames = op
            audio = (np.sin(np.arange(int(seconds * 48000)) * 0.05).astype(np.float32) * 0.3, 48000)
            handles.append(small.submit({"text": f"op {len(handles)}", "reference_audio": audio, "max_frames": frames}))
        elif op[0] in ("cancel", "fail") and handles:
            target = handles[op[1] % len(handles)]
            target.cancel() if op[0] == "cancel" else doomed.add(target.request_id)
        elif op[0] == "update":
            version += 1
            weight = small.model.local_transformer.ln_f.weight.detach().clone()
            small.update_weights({"local_transformer.ln_f.weight": weight}, version=version, mode=op[1], timeout=60)
        elif op[0] == "pause":
            time.sleep(op[1])
    results = [h.result(60) for h in handles]
    assert all(r.finish_reason in ("stop", "length", "abort", "error") for r in results)
    assert all(finished.get(h.request_id) == 1 for h in handles)  # every request ended exactly once
    s = wait_idle(small)
    assert s["weight_version"] == version and small.engine.thread.is_alive()
    assert not small.engine.pools["kv"]._owner and not small.engine.pools["codec"]._owner and not small.engine.pools["encode"]._owner
    assert s["encoding"] == 0
    assert small.engine.pools["kv"].free_count == 3 and not small.engine.requests.waiting and not small.engine.requests.running
    assert torch.isfinite(small.model.local_transformer.ln_f.weight).all()
