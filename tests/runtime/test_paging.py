"""Paged KV in the runtime: paged == the contiguous reference bit for bit, the prefix cache (reuse,
cached == uncached, invalidation by new weights), a group's prompt blocks shared without copies, and a
dry pool preempting the newest request, which recomputes its rows and finishes with its own codes;
nothing leaks after any mix of finish, cancel, failure and preemption."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.card import load_card
from v2.models.moss_tts_local.generate import generate_batch
from v2.runtime import Runtime

from conftest import doom_requests, wait_idle

VOICE = np.random.default_rng(7).integers(0, 1024, (125, 12))  # a 10 s voice prompt
ROLLOUT = {"profile": "rollout", "decode_audio": False}


def make(**ar) -> Runtime:
    card = load_card("moss_tts_local_tiny")
    loops = card.loops.model_copy(update={"ar_decode": card.loops.ar_decode.model_copy(update=ar)})
    return Runtime.from_card(card.model_copy(update={"loops": loops}), device="cpu")


def short_rows(rt: Runtime, n: int, seed: int) -> list[list[int]]:
    """A prompt of n rows: n - 1 byte-token rows, then audio_start (the frame is decoded from its state)."""
    pad, ids = rt.model.cfg.audio_pad_code, rt.model.cfg.ids
    tokens = np.random.default_rng(seed).integers(0, 256, n - 1).tolist()
    return [[t] + [pad] * 12 for t in tokens] + [[ids.audio_start] + [pad] * 12]


def leak_free(rt: Runtime) -> dict:
    s = wait_idle(rt)
    pager = rt.engine.kv.pager
    pager.blocks.check()
    assert not pager.tables and s["kv_blocks_free"] == s["kv_blocks"] and s["kv_preempted"] == 0
    return s


@pytest.fixture(scope="module")
def uncached():
    rt = make(prefix_cache=False)
    yield rt
    rt.close()


@pytest.mark.exact
def test_the_paged_runtime_equals_the_contiguous_reference_bit_for_bit(uncached):
    """Each request alone through the paged runtime == `generate_batch` over the contiguous `KVCache`:
    codes and every logprob, the final stop decision's included."""
    sampling = uncached.card.loops.ar_decode.sampling.settings()
    for i, text in enumerate(["Hello there.", "A longer sentence, to be spoken at a steady pace.", "Yes."]):
        r = uncached.submit({"text": text, "seed": 30 + i, "max_frames": 40, **ROLLOUT}).result(60)
        t = r.trajectory
        (g,) = generate_batch(uncached.model, [torch.from_numpy(t.prompt_rows)], [sampling], [30 + i], max_frames=40)
        assert np.array_equal(r.codes, g.codes.numpy())
        assert np.array_equal(t.logprobs, g.logprobs[: len(r.codes)].numpy())
        if t.stop_logprob is not None:
            assert t.stop_logprob == float(g.logprobs[len(r.codes), 0])
    leak_free(uncached)


@pytest.mark.exact
def test_a_cached_voice_prefix_is_reused_and_gives_the_uncached_codes(uncached):
    with make() as rt:
        ask = lambda text, seed: {"text": text, "reference_codes": VOICE, "seed": seed, "max_frames": 24, **ROLLOUT}  # noqa: E731
        rt.submit(ask("The voice, first sentence.", 1)).result(60)
        before = rt.stats()
        second = rt.submit(ask("And a second one in the same voice.", 2)).result(60)
        after = rt.stats()
        hits = after["prefix_cache_hits"] - before["prefix_cache_hits"]
        prompt = len(second.trajectory.prompt_rows)
        assert hits * 16 >= 125 and after["prefix_cache_misses"] > before["prefix_cache_misses"]
        assert after["prefilled_rows"] - before["prefilled_rows"] == prompt - hits * 16  # only the rest
        cold = uncached.submit(ask("And a second one in the same voice.", 2)).result(60)
        assert np.array_equal(second.codes, cold.codes)  # cached == uncached
        np.testing.assert_allclose(second.trajectory.logprobs, cold.trajectory.logprobs, atol=1e-5, rtol=0)
        assert after["prefix_cache_blocks"] >= hits and leak_free(rt)["kv_blocks_held"] == 0


def test_new_weights_invalidate_the_prefix_cache():
    with make() as rt:
        req = {"text": "Same prompt each time.", "seed": 4, "max_frames": 6, **ROLLOUT}
        rt.submit(req).result(60)
        hit = rt.stats()["prefix_cache_hits"]
        rt.submit(req).result(60)
        assert rt.stats()["prefix_cache_hits"] > hit
        weight = rt.model.local_transformer.ln_f.weight.detach().clone()
        rt.update_weights({"local_transformer.ln_f.weight": weight}, version=1)
        before = rt.stats()
        rt.submit(req).result(60)
        after = rt.stats()
        assert after["prefix_cache_hits"] == before["prefix_cache_hits"]  # nothing computed before is reused
        assert after["prefix_cache_misses"] > before["prefix_cache_misses"]
        assert after["prefix_cache_blocks"] == after["prefix_cache_misses"] - before["prefix_cache_misses"]


def test_a_group_shares_its_prompt_blocks_and_copies_only_a_partly_filled_last_block(uncached):
    before = uncached.stats()
    handles = uncached.submit_many([{"text": "One prompt, four samples.", "seed": 40 + i, "max_frames": 30,
                                     "min_frames": 30, "stream": True} for i in range(4)], share_prompt=True)
    next(iter(handles[3]))  # the last member is decoding: all four hold their blocks now
    during = uncached.stats()
    results = [h.result(60) for h in handles]
    after = uncached.stats()
    prompt = results[0].metrics.prompt_rows
    own = -(-prompt // 16)  # blocks of one prompt
    assert after["prefilled_rows"] - before["prefilled_rows"] == prompt  # prefilled once
    assert after["shared_prefills"] - before["shared_prefills"] == 3
    assert after["kv_block_copies"] - before["kv_block_copies"] == (3 if prompt % 16 else 0)  # the shared last block
    assert during["kv_blocks_held"] <= (own - 1) + 4 * (1 + -(-30 // 16))  # full prompt blocks once, not 4 times
    assert len({r.codes.tobytes() for r in results}) == 4
    leak_free(uncached)


def test_a_dry_pool_preempts_the_newest_and_every_request_finishes_with_its_own_codes():
    """Five requests whose prompts fit but whose frames do not: the newest give their blocks back and later
    recompute their prompt and frames; each ends with the codes it makes alone, and a streamed one's chunks
    still make its final audio."""
    with make(max_prompt_rows=128, max_frames=64, kv_blocks=12, prefix_cache=False) as rt:  # one request: 12 blocks
        prompts = [short_rows(rt, 20 + 5 * i, i) for i in range(5)]
        reqs = [{"prompt_rows": p, "seed": 60 + i, "max_frames": 60, "min_frames": 60, "stream": i == 4}
                for i, p in enumerate(prompts)]
        handles = rt.submit_many(reqs)
        chunks = list(handles[4])
        results = [h.result(120) for h in handles]
        s = leak_free(rt)
        assert s["kv_preemptions"] > 0 and all(r.finish_reason == "length" for r in results)
        sampling = rt.card.loops.ar_decode.sampling.settings()
        for i, r in enumerate(results):
            (g,) = generate_batch(rt.model, [torch.tensor(prompts[i])], [sampling], [60 + i], max_frames=60,
                                  min_frames=60)
            assert np.array_equal(r.codes, g.codes.numpy()), i
        assert np.array_equal(np.concatenate([c.audio for c in chunks], axis=1), results[4].audio)
        whole = rt.family.codec.decode(torch.from_numpy(results[4].codes).T[None])[0].numpy()
        assert np.array_equal(whole, results[4].audio)


def test_a_weight_update_waits_for_preempted_requests_too():
    """An update in "wait" mode admits nothing until running requests end; preempted ones still resume."""
    with make(max_prompt_rows=128, max_frames=64, kv_blocks=12, prefix_cache=False) as rt:
        handles = rt.submit_many([{"prompt_rows": short_rows(rt, 20, i), "seed": i, "max_frames": 60,
                                   "min_frames": 60} for i in range(5)])
        deadline = time.time() + 30
        while rt.stats()["kv_preempted"] == 0 and time.time() < deadline:
            time.sleep(0.002)
        assert rt.stats()["kv_preempted"] > 0
        weight = rt.model.local_transformer.ln_f.weight.detach().clone()
        rt.update_weights({"local_transformer.ln_f.weight": weight}, version=1, mode="wait", timeout=30)
        assert [h.result(60).finish_reason for h in handles] == ["length"] * 5
        leak_free(rt)


@pytest.fixture(scope="module")
def dry():
    rt = make(max_prompt_rows=128, max_frames=64, kv_blocks=14, max_waiting=64)
    yield rt
    rt.close()


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 3), st.integers(1, 40), st.integers(2, 60)),
    st.tuples(st.just("group"), st.integers(2, 3), st.integers(1, 30)),
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("fail"), st.integers(0, 20)),
    st.tuples(st.just("pause"), st.floats(0, 0.05)),
    st.tuples(st.just("update"), st.sampled_from(["wait", "abort"])),  # preempted requests finish first too
), min_size=1, max_size=8)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_nothing_leaks_after_any_mix_of_finish_cancel_failure_and_preemption(dry, monkeypatch, ops):
    doomed = doom_requests(dry, monkeypatch)
    handles = []
    for op in ops:
        if op[0] == "submit":
            _, count, frames, rows = op
            handles += dry.submit_many([{"prompt_rows": short_rows(dry, rows, len(handles) + i), "seed": i,
                                         "max_frames": frames} for i in range(count)])
        elif op[0] == "group":
            _, n, frames = op
            handles += dry.submit_many([{"prompt_rows": short_rows(dry, 25, len(handles)), "seed": i,
                                         "max_frames": frames, **ROLLOUT} for i in range(n)], share_prompt=True)
        elif op[0] in ("cancel", "fail") and handles:
            target = handles[op[1] % len(handles)]
            target.cancel() if op[0] == "cancel" else doomed.add(target.request_id)
        elif op[0] == "update":
            weight = dry.model.local_transformer.ln_f.weight.detach().clone()
            dry.update_weights({"local_transformer.ln_f.weight": weight}, version=dry.weight_version + 1, mode=op[1],
                               timeout=60)
        else:
            time.sleep(op[1] if op[0] == "pause" else 0)
    results = [h.result(120) for h in handles]
    assert all(r.finish_reason in ("stop", "length", "abort", "error") for r in results)
    assert all(r.error == "RuntimeError: injected" for r, h in zip(results, handles)
               if r.finish_reason == "error")
    leak_free(dry)
    assert dry.engine.pools["kv"].free_count == dry.card.loops.ar_decode.max_running
