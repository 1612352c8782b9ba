"""The overlapped step on the CPU twin of an asynchronous device (`SimulatedStream`: work runs in order on a
worker thread, results come back after an added latency, launches return at once): the engine plans and
launches step N+1 before it reads step N, and every result equals the same request on the synchronous CPU
stream: codes and audio bit for bit, streamed == final, long text, groups, preemption, cloning; logprobs to
the last bits (a stop read one step later changes later batches' sizes, and a batch's size can change a
matmul's rounding: the property "batched == alone" is exact for codes, not for logprobs' last bits).
Then the overlap's own cases: a stop read one step late (the frame launched past it is dropped), a cancel
between launch and read, a failing launched step, a weight update with a step in flight."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from v2.card import load_card
from v2.contracts import WorkUnitKind
from v2.families.moss_tts_local.kinds import LoopKind
from v2.runtime import Runtime
from v2.runtime.device import HostStream, SimulatedStream

from conftest import check_exact, wait_idle
from holds import Hold

LATENCY = 0.002
ROLLOUT = {"profile": "rollout", "decode_audio": False}


def card(**ar):
    c = load_card("moss_tts_local_tiny")
    loops = c.loops.model_copy(update={"ar_decode": c.loops.ar_decode.model_copy(update=ar)})
    return c.model_copy(update={"loops": loops})


def pair(**ar) -> tuple[Runtime, Runtime]:
    """The same card on the synchronous CPU stream and on the simulated asynchronous device."""
    return (Runtime.from_card(card(**ar), device="cpu", stream=HostStream()),
            Runtime.from_card(card(**ar), device="cpu", stream=SimulatedStream(LATENCY)))


@pytest.fixture(scope="module")
def rts():
    host, sim = pair()
    yield host, sim
    host.close()
    sim.close()


def leak_free(rt: Runtime) -> dict:
    s = wait_idle(rt)
    rt.engine.kv.pager.blocks.check()
    assert not rt.engine.kv.pager.tables and s["kv_blocks_free"] == s["kv_blocks"] and s["steps_in_flight"] == 0
    assert s["encode_slots_in_use"] == 0
    return s


def same(a, b) -> None:
    assert a.finish_reason == b.finish_reason and a.error == b.error
    assert np.array_equal(a.codes, b.codes)
    assert np.array_equal(a.audio, b.audio)
    if a.trajectory is not None:
        np.testing.assert_allclose(a.trajectory.logprobs, b.trajectory.logprobs, rtol=0, atol=2e-6)
        assert np.array_equal(a.trajectory.stop_decisions, b.trajectory.stop_decisions)
        assert (a.trajectory.stop_logprob is None) == (b.trajectory.stop_logprob is None)


def run_both(rts, requests: list[dict], **options) -> list[tuple]:
    out = []
    for rt in rts:
        handles = rt.submit_many(requests, **options)
        out.append([h.result(120) for h in handles])
    return list(zip(*out))


def test_the_simulated_device_overlaps_steps_and_its_results_equal_the_cpu_streams(rts):
    host, sim = rts
    assert host.engine.stream.depth == 0 and sim.engine.stream.depth == 1
    requests = [{"text": f"request {i} " * (1 + i % 4), "seed": i, "max_frames": 6 + 5 * i, "stream": True,
                 "profile": "rollout"} for i in range(8)]
    streamed = {}
    for rt in rts:
        handles = rt.submit_many(requests)
        streamed[rt is sim] = [(list(h), h.result(120)) for h in handles]
    for (chunks_h, a), (chunks_s, b) in zip(streamed[False], streamed[True]):
        same(a, b)
        assert [c.frames for c in chunks_h] == [c.frames for c in chunks_s]  # the same chunking
        assert np.array_equal(np.concatenate([c.audio for c in chunks_s], axis=1), b.audio)  # streamed == final
        assert chunks_s[-1].final and not any(c.final for c in chunks_s[:-1])
    assert any(r.finish_reason == "stop" for _, r in streamed[True])
    assert any(r.finish_reason == "length" for _, r in streamed[True])
    leak_free(host), leak_free(sim)


def test_batched_equals_alone_on_the_simulated_device(rts):
    _, sim = rts
    requests = [{"text": f"alone {i}", "seed": 40 + i, "max_frames": 12, **ROLLOUT} for i in range(5)]
    together = [h.result(60) for h in sim.submit_many(requests)]
    for r, request in zip(together, requests):
        same(sim.submit(request).result(60), r)
    leak_free(sim)


def test_a_stop_read_one_step_late_drops_the_frame_launched_past_it(rts):
    host, sim = rts
    before = {rt is sim: rt.stats()["kinds"]["ar_frame"]["rows"] for rt in rts}
    request = {"text": "stops early", "seed": 5, "max_frames": 200, "stream": True, "profile": "rollout"}
    (a, b), = run_both(rts, [request])
    assert b.finish_reason == "stop" and len(b.codes) < 200
    same(a, b)
    ran = {rt is sim: rt.stats()["kinds"]["ar_frame"]["rows"] - before[rt is sim] for rt in rts}
    assert ran[False] == len(a.codes) + 1  # the frames and the stop decision
    assert ran[True] == ran[False] + 1     # one frame launched past the stop, dropped
    assert len(b.trajectory.logprobs) == len(b.codes) and b.audio.shape[1] == len(b.codes) * sim.family.codec.cfg.hop
    leak_free(sim)


def test_long_text_groups_and_cloning_equal_the_cpu_streams():
    host, sim = pair(max_segment_chars=60)
    try:
        text = " ".join(f"Sentence number {i} is here." for i in range(8))
        (a, b), = run_both((host, sim), [{"text": text, "seed": 2, "max_frames": 5, "stream": True}])
        same(a, b)
        assert len(b.segments) > 2 and a.segments == b.segments
        group = [{"text": "a shared prompt", "seed": 9, "max_frames": 10, **ROLLOUT}] * 4
        for a, b in run_both((host, sim), group, share_prompt=True):
            same(a, b)
        voice = np.random.default_rng(1).standard_normal((2, 48000)).astype(np.float32) * 0.1
        cloned = [{"text": f"clone {i}", "seed": i, "max_frames": 6, "reference_audio": (voice, 48000)} for i in range(3)]
        for a, b in run_both((host, sim), cloned):
            same(a, b)
        assert np.array_equal(host.encode_audio((voice, 48000)), sim.encode_audio((voice, 48000)))
        leak_free(host), leak_free(sim)
    finally:
        host.close(), sim.close()


def test_preempted_requests_equal_the_cpu_streams():
    host, sim = pair(max_prompt_rows=128, max_frames=64, kv_blocks=12, prefix_cache=False)
    try:
        pad, start = host.model.cfg.audio_pad_code, host.model.cfg.ids.audio_start
        rows = lambda i: [[t] + [pad] * 12 for t in range(i, i + 19)] + [[start] + [pad] * 12]  # noqa: E731
        requests = [{"prompt_rows": rows(i), "seed": i, "max_frames": 60, "min_frames": 60, **ROLLOUT}
                    for i in range(5)]
        for a, b in run_both((host, sim), requests):
            assert np.array_equal(a.codes, b.codes)
            np.testing.assert_allclose(a.trajectory.logprobs, b.trajectory.logprobs, atol=5e-7)
        assert sim.stats()["kv_preemptions"] > 0
        leak_free(sim)
    finally:
        host.close(), sim.close()


def test_a_cancel_between_launch_and_read_ends_the_request_and_frees_everything(monkeypatch):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.05))
    try:
        frames = rt.engine.executors[WorkUnitKind.AR_FRAME]
        real, calls, held, release = frames.launch, [], threading.Event(), threading.Event()

        def launch(work):  # on the device's worker: the fifth frame step waits for the cancel (launched, unread)
            calls.append(work)
            if len(calls) == 5:
                held.set()
                release.wait(120)
            return real(work)

        monkeypatch.setattr(frames, "launch", launch)
        handle = rt.submit({"text": "cancelled", "seed": 1, "max_frames": 100, "min_frames": 100, "stream": True})
        assert held.wait(120)  # a hang check
        handle.cancel()
        release.set()
        r = handle.result(120)
        assert r.finish_reason == "abort" and len(r.codes) < 100
        leak_free(rt)
        again = rt.submit({"text": "after", "seed": 2, "max_frames": 5}).result(120)
        assert again.finish_reason in ("length", "stop")
    finally:
        rt.close()


def test_a_failing_launched_step_fails_only_its_requests(monkeypatch):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(LATENCY))
    try:
        real, calls = rt.family.codec_exec.launch, {"n": 0}

        def flaky(batch):  # runs on the device's worker thread: the error reaches the engine at the read
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("injected device failure")
            return real(batch)

        monkeypatch.setattr(rt.family.codec_exec, "launch", flaky)
        victim = rt.submit({"text": "victim", "seed": 1, "max_frames": 10, "min_frames": 10, "stream": True})
        r = victim.result(30)
        assert r.finish_reason == "error" and "injected device failure" in r.error
        survivor = rt.submit({"text": "survivor", "seed": 2, "max_frames": 10, "min_frames": 10}).result(30)
        assert survivor.finish_reason == "length" and survivor.audio.shape[1] > 0
        leak_free(rt)
    finally:
        rt.close()


def test_a_weight_update_waits_for_the_step_in_flight(rts, monkeypatch):
    host, sim = rts
    request = {"text": "updated", "seed": 3, "max_frames": 40, "min_frames": 40, **ROLLOUT}
    weight = sim.model.local_transformer.ln_f.weight.detach().clone()
    # held at their second frame until seen running (a poll that a loaded machine delays past their 40 frames
    # would never see them), then let go before the update, which waits for them
    hold = Hold(sim.family.ar_loop, monkeypatch, lambda state: len(state.codes) >= 2)
    handles = sim.submit_many([{**request, "seed": i} for i in range(3)])  # admitted together
    try:
        hold.wait()
        # running and stepping (a step in flight whenever the engine waits: each read waits for the device)
        assert sim.stats()["kinds"]["ar_frame"]["calls"] > 0 and sim.stats()["running"] == 3, sim.stats()
    finally:
        hold.release()
    version = sim.weight_version
    sim.update_weights({"local_transformer.ln_f.weight": weight * 1.5}, version=sim.weight_version + 1, mode="wait",
                       timeout=60)
    old = [h.result(60) for h in handles]  # finished on the old weights first
    assert [r.trajectory.weight_version for r in old] == [version] * 3
    for i, r in enumerate(old):
        same(host.submit({**request, "seed": i}).result(60), r)
    host.update_weights({"local_transformer.ln_f.weight": weight * 1.5}, version=host.weight_version + 1)
    same(host.submit(request).result(60), sim.submit(request).result(60))  # and the new ones alike
    for rt in rts:
        rt.update_weights({"local_transformer.ln_f.weight": weight}, version=rt.weight_version + 1)
    leak_free(sim)


def test_rollouts_on_the_simulated_device_equal_the_teacher_forced_recompute(rts):
    _, sim = rts
    batch = sim.rollout([{"text": "a rollout"}, {"text": "another one"}], n=3, seed=5, max_frames=20)
    for t in batch.trajectories():
        check_exact(sim.model, t)
    leak_free(sim)


def test_failures_on_the_device_fail_whom_they_concern_and_no_one_else(monkeypatch):
    """A frame launched past a stop that fails fails nobody; a state change (a slot's settings) that fails on
    the device fails its request alone; a group leader's prompt that fails on the device fails the members
    that took it, even when the leader was cancelled between launch and read."""
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu", stream=SimulatedStream(0.01))
    try:
        request = {"text": "stops early", "seed": 5, "max_frames": 200}
        frames = len(rt.submit(request).result(60).codes)
        frame_halves, prefill_halves = rt.family.executors[WorkUnitKind.AR_FRAME], rt.family.executors[WorkUnitKind.PREFILL]
        real_launch = frame_halves.launch

        def past_stop(batch):  # the frame after the stop decision (frame `frames`)
            if int(batch.host[2, 0]) == frames + 1:
                raise RuntimeError("injected failure past the stop")
            return real_launch(batch)

        monkeypatch.setattr(frame_halves, "launch", past_stop)
        r = rt.submit(request).result(60)
        assert r.finish_reason == "stop" and r.error is None and len(r.codes) == frames
        monkeypatch.setattr(frame_halves, "launch", real_launch)

        real_admit = rt.family.ar_exec.admit_device

        def bad_admit(slot, settings, seed):
            if seed == 666:
                raise RuntimeError("injected admit failure")
            return real_admit(slot, settings, seed)

        monkeypatch.setattr(rt.family.ar_exec, "admit_device", bad_admit)
        handles = rt.submit_many([{"text": f"bystander {i}", "seed": i, "max_frames": 20, "min_frames": 20}
                                  for i in range(2)])
        bad = rt.submit({"text": "bad", "seed": 666, "max_frames": 5}).result(30)
        assert bad.finish_reason == "error" and "injected admit failure" in bad.error
        assert [h.result(30).finish_reason for h in handles] == ["length", "length"]
        monkeypatch.setattr(rt.family.ar_exec, "admit_device", real_admit)

        def failing_prefill(plans):
            raise RuntimeError("injected prefill failure")

        monkeypatch.setattr(prefill_halves, "launch", failing_prefill)
        real_cancels, cancelled = rt.engine.requests.apply_cancels, []

        def cancel_leader_in_flight():  # the leader's prompt is launched (members took it), not yet read
            leader = next(iter(rt.engine.requests.running.values()), None)
            ar = leader.states.get(LoopKind.AR_DECODE) if leader is not None else None
            if not cancelled and ar is not None and ar.prefilled >= ar.prompt_len:
                cancelled.append(leader.id)
                rt.engine.requests.cancels.add(leader.id)
            real_cancels()

        monkeypatch.setattr(rt.engine.requests, "apply_cancels", cancel_leader_in_flight)
        group = rt.submit_many([{"text": "a shared prompt", "seed": 9 + i, "max_frames": 10, "min_frames": 10}
                                for i in range(3)], share_prompt=True)
        results = [h.result(30) for h in group]
        assert cancelled and results[0].finish_reason == "abort"
        assert all(r.finish_reason == "error" and "injected prefill failure" in r.error for r in results[1:])
        monkeypatch.undo()
        leak_free(rt)
        assert not rt.engine.groups.unread
    finally:
        rt.close()
