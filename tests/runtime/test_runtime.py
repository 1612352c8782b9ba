"""The runtime end to end on the tiny card: real batching, batched == alone, streaming, lifecycle."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import torch

from v2.card import load_card
from v2.models.moss_tts_local.generate import generate, generate_batch
from v2.sampling_settings import SamplingSettings
from v2.errors import RequestError
from v2.runtime import Runtime

from conftest import wait_idle
from holds import Hold

TEXTS = ["Hello there.", "A longer sentence, to be spoken at a steady pace.", "Yes.", "Numbers: one, two, three.",
         "Short one.", "What a lovely day it is today!", "Testing, testing.", "The end."]


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def req(i: int, **kw):
    return {"text": TEXTS[i % len(TEXTS)] + " " * (i // len(TEXTS)), "seed": 100 + i, "max_frames": 30, **kw}


@pytest.mark.exact
def test_sixteen_concurrent_requests_share_batched_steps_and_equal_each_alone(runtime):
    before = runtime.stats()["kinds"]["ar_frame"]
    handles = [runtime.submit(req(i, min_frames=4 + i)) for i in range(16)]
    results = [h.result(120) for h in handles]
    after = runtime.stats()["kinds"]["ar_frame"]
    calls, rows = after["calls"] - before["calls"], after["rows"] - before["rows"]
    longest = max(len(r.codes) for r in results)
    assert rows == sum(len(r.codes) + (r.finish_reason == "stop") for r in results)
    assert rows / calls > 8  # one batched call carries many requests' frames
    assert longest <= calls <= longest + 8  # about the longest request, not the sum
    assert len({r.codes.tobytes() for r in results}) == 16
    for i in (0, 7, 13):
        alone = runtime.submit(req(i, min_frames=4 + i)).result(60)
        assert np.array_equal(alone.codes, results[i].codes)
        assert np.array_equal(alone.audio, results[i].audio)
    wait_idle(runtime)


def test_codes_equal_model_generate_for_seeded_sampling(runtime):
    card_sampling = runtime.card.loops.ar_decode.sampling.settings()
    for i in (1, 2):
        result = runtime.submit(req(i, max_frames=25)).result(60)
        from v2.models.moss_tts_local.prompt import build_prompt
        rows = build_prompt(runtime.family.tokenizer, runtime.model.cfg, TEXTS[i])
        codes = generate(runtime.model, rows, max_frames=25, seed=100 + i, sampling=card_sampling)
        assert torch.equal(torch.from_numpy(result.codes), codes)


def test_codes_equal_the_reference_for_greedy(ref_model, ref_codec, ref):
    card = load_card("moss_tts_local_tiny")
    rt = Runtime(card, ref_model, ref_codec, tokenizer=None)
    try:
        greedy = {"stop": {"temperature": 0.0}, "audio": {"temperature": 0.0}}  # both heads, as the reference ran
        forced = [rt.submit({"prompt_rows": ref[f"{p}_input_ids"], "sampling": greedy, "max_frames": 8, "min_frames": 8})
                  for p in ("p1", "p2")]
        free = [rt.submit({"prompt_rows": ref[f"{p}_input_ids"], "sampling": greedy, "max_frames": 12})
                for p in ("p1", "p2")]
        for p, h in zip(("p1", "p2"), forced):
            assert np.array_equal(h.result(60).codes, ref[f"{p}_gen_codes"])
        for p, h in zip(("p1", "p2"), free):
            r = h.result(60)
            assert r.finish_reason == "stop" and np.array_equal(r.codes, ref[f"{p}_free_rows"][:, 1:])
        (gen,) = generate_batch(ref_model, [torch.from_numpy(ref["p2_input_ids"])], [SamplingSettings.uniform(0.0)],
                                [0], max_frames=12)
        assert np.array_equal(free[1].result().codes, gen.codes.numpy())
    finally:
        rt.close()


def test_streamed_chunks_equal_the_final_audio_and_arrive_early(runtime, monkeypatch):
    seen: list[tuple[int, bool]] = []
    # frame 10 waits for the first chunk's subscriber (it cannot end before it however fast the host is); a chunk
    # held back to the end never comes while it waits, and the check below fails
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 10, timeout=30)
    handle = runtime.submit(req(3, max_frames=40, min_frames=40, stream=True))

    def on_chunk(c) -> None:
        seen.append((c.frames, handle.done))
        hold.release()

    handle.subscribe(on_chunk)
    chunks = list(handle)
    result = handle.result(60)
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert [c.frames for c in chunks] == [3, 6, 12, 19] and chunks[-1].final and not any(c.final for c in chunks[:-1])
    assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), result.audio)
    assert result.audio.dtype == np.float32 and result.audio.shape == (2, 40 * 3840)
    assert seen[0] == (3, False)  # the first chunk came while the request was still running
    whole = runtime.family.codec.decode(torch.from_numpy(result.codes).T[None])[0].numpy()
    assert np.array_equal(whole, result.audio)
    assert 0 < result.metrics.ttfa_s < result.metrics.total_s and result.metrics.rtf > 0


def test_requests_join_mid_flight_and_finish_at_different_lengths(runtime, monkeypatch):
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 8)  # all four still run
    first = [runtime.submit(req(i, max_frames=10 + 6 * i, min_frames=10 + 6 * i, stream=True)) for i in range(4)]
    try:
        hold.wait()
        next(iter(first[3]))  # the longest is producing audio
        late = [runtime.submit(req(8 + i, max_frames=5 + i, min_frames=5 + i)) for i in range(4)]
        assert not any(h.done for h in first)  # they join mid-flight
    finally:
        hold.release()
    results = [h.result(60) for h in first + late]
    assert [len(r.codes) for r in results] == [10, 16, 22, 28, 5, 6, 7, 8]
    assert all(r.finish_reason == "length" for r in results)
    for i, h in ((1, first[1]), (9, late[1])):
        alone = runtime.submit(req(i, max_frames=len(h.result().codes), min_frames=len(h.result().codes))).result(60)
        assert np.array_equal(alone.codes, h.result().codes)
    wait_idle(runtime)


def test_cancel_mid_stream_frees_its_slots_at_once(runtime, monkeypatch):
    hold = Hold(runtime.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 20)  # past the first chunk
    long = runtime.submit(req(5, max_frames=200, min_frames=200, stream=True))
    other = runtime.submit(req(6, max_frames=60, min_frames=60))
    stream = iter(long)
    try:
        first = next(stream)
        hold.wait()
        long.cancel()  # before its 21st frame, however fast the host is
    finally:
        hold.release()
    result = long.result(30)
    assert result.finish_reason == "abort" and 0 < len(result.codes) < 200
    assert np.array_equal(np.concatenate([first.audio] + [c.audio for c in stream], axis=1), result.audio)
    during = runtime.stats()
    assert during["kv_slots_in_use"] <= 1 and during["codec_slots_in_use"] <= 1  # only `other` may still hold slots
    assert other.result(60).finish_reason == "length"
    wait_idle(runtime)


def small_runtime(max_running: int) -> Runtime:
    card = load_card("moss_tts_local_tiny")
    ar = card.loops.ar_decode.model_copy(update={"max_running": max_running})
    return Runtime.from_card(card.model_copy(update={"loops": card.loops.model_copy(update={"ar_decode": ar})}),
                             device="cpu")


def test_requests_wait_for_a_slot_and_cancel_before_admission(monkeypatch):
    rt = small_runtime(1)
    hold = Hold(rt.family.ar_loop, monkeypatch, lambda state: True)  # the first request's first frame
    try:
        handles = [rt.submit(req(i, max_frames=20, min_frames=20)) for i in range(3)]
        try:
            hold.wait()
            handles[2].cancel()  # while the first holds the one slot, however fast the host is
        finally:
            hold.release()
        cancelled = handles[2].result(30)
        assert cancelled.finish_reason == "abort" and len(cancelled.codes) == 0
        done = [h.result(60) for h in handles[:2]]
        assert all(r.finish_reason == "length" for r in done)
        assert done[1].metrics.queue_s > done[0].metrics.queue_s  # the second waited for the only slot
        assert rt.stats()["kinds"]["ar_frame"]["mean_batch"] == 1.0
        wait_idle(rt)
    finally:
        rt.close()


def test_asyncio_client_consumes_several_streams_concurrently(runtime):
    async def consume(i: int):
        handle = runtime.submit(req(i, max_frames=30, min_frames=30, stream=True))
        chunks = [c async for c in handle]
        return chunks, handle.result(0)

    async def main():
        return await asyncio.gather(*(consume(i) for i in range(5)))

    for chunks, result in asyncio.run(main()):
        assert len(chunks) >= 2 and chunks[-1].final
        assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), result.audio)
    wait_idle(runtime)


def test_non_streaming_result_and_single_final_chunk(runtime):
    handle = runtime.submit(req(2, max_frames=12, min_frames=12))
    result = handle.result(60)
    chunks = list(handle)
    assert len(chunks) == 1 and chunks[0].final and np.array_equal(chunks[0].audio, result.audio)
    assert result.codes.shape == (12, 12) and result.trajectory is None


def test_rollout_profile_records_a_trajectory(runtime):
    result = runtime.submit(req(4, max_frames=15, profile="rollout")).result(60)
    t = result.trajectory
    assert t is not None and np.array_equal(t.codes, result.codes) and t.seed == 104
    assert t.logprobs.shape == (len(result.codes), 13) and np.all(t.logprobs <= 0)
    assert (t.stop_logprob is not None) == (result.finish_reason == "stop") == bool(t.stop_decisions.any())


@pytest.mark.parametrize("bad,field", [({"text": "   "}, "text"), ({"text": "x", "max_frames": 10**6}, "max_frames"),
                                       ({"text": "x", "sampling": {"top_p": 0}}, "sampling.top_p"),
                                       ({"prompt_rows": [[1] * 12]}, "prompt_rows"),
                                       ({"text": "x", "min_frames": 50, "max_frames": 10}, "min_frames")])
def test_bad_requests_are_refused_at_submit_naming_the_field(runtime, bad, field):
    with pytest.raises(RequestError, match=field):
        runtime.submit(bad)
    assert runtime.stats()["waiting"] == 0


def test_a_failing_batched_call_fails_only_its_requests(runtime, monkeypatch):
    real = runtime.family.codec_exec.launch
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected codec failure")
        return real(batch)

    monkeypatch.setattr(runtime.family.codec_exec, "launch", flaky)
    victim = runtime.submit(req(1, max_frames=10, min_frames=10, stream=True))
    assert victim.result(60).finish_reason == "error" and "injected" in victim.result().error
    survivor = runtime.submit(req(2, max_frames=10, min_frames=10))
    assert survivor.result(60).finish_reason == "length"
    wait_idle(runtime)


def test_close_aborts_what_runs_and_frees_everything(monkeypatch):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    real = rt.family.ar_loop.advance

    def advance(state, plan, row):  # each frame takes at least 20 ms however fast the host is: 300 take >= 6 s
        time.sleep(0.02)
        return real(state, plan, row)

    monkeypatch.setattr(rt.family.ar_loop, "advance", advance)
    handles = [rt.submit(req(i, max_frames=300, min_frames=300)) for i in range(3)]
    time.sleep(0.2)
    rt.close()
    assert all(h.result(10).finish_reason == "abort" for h in handles)
    s = rt.stats()
    assert s["kv_slots_in_use"] == s["codec_slots_in_use"] == s["running"] == s["waiting"] == 0
    with pytest.raises(RuntimeError, match="closed"):
        rt.submit(req(0))
    assert not any(t.name == "v2-engine" and t.is_alive() for t in threading.enumerate() if t is rt.engine.thread)


def test_one_device_to_host_copy_per_step(runtime, monkeypatch):
    wait_idle(runtime)
    per_step: list[int] = []
    transfers = {"calls": 0, "tensors": 0}
    real_fetch, real_step = runtime.engine.stream.fetch, runtime.engine.step

    def counting(pendings):
        transfers["calls"] += 1
        transfers["tensors"] += len(pendings)
        return real_fetch(pendings)

    def step():
        before = transfers["calls"]
        real_step()
        per_step.append(transfers["calls"] - before)

    monkeypatch.setattr(runtime.engine.stream, "fetch", counting)
    monkeypatch.setattr(runtime.engine, "step", step)
    handles = runtime.submit_many([req(i, max_frames=12, min_frames=12, stream=True) for i in range(4)])
    [h.result(60) for h in handles]
    wait_idle(runtime)
    assert per_step and max(per_step) == 1  # never more than one transfer in a step
    assert transfers["tensors"] > len(per_step)  # several results (frames and audio) share a transfer
