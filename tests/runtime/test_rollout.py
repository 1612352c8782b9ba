"""RL rollouts: exact logprobs (== the teacher-forced recompute), groups, weight updates, export."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.card import build_model, load_card
from v2.sampling_settings import SamplingSettings
from v2.families.moss_tts_local.recompute import logprobs
from v2.rl.trajectory import collate, write_jsonl, write_npz
from v2.runtime import Runtime
from v2.rl.batch import sample_seed

from conftest import check_exact
from holds import slow_frames
from v2.runtime.weight_updates import WeightUpdateError

TEXTS = ["Hello there, this is a rollout.", "Second prompt for the group test."]


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def recompute(model, t) -> torch.Tensor:
    with torch.no_grad():
        out = logprobs(model, torch.from_numpy(t.prompt_rows), torch.from_numpy(t.codes), t.sampling,
                       min_frames=t.min_frames, final_stop=t.stop_logprob is not None)
    return out


@pytest.mark.parametrize("sampling", [
    {"temperature": 0.0},
    {"temperature": 1.2, "top_k": 30, "top_p": 0.85},
    {"repetition_penalty": 1.4},
    {"audio": {"temperature": 1.5, "top_k": 0, "top_p": 0.7}},  # no top-k: the full-sort path
])
@pytest.mark.exact
def test_rollout_logprobs_equal_the_teacher_forced_recompute(runtime, sampling):
    batch = runtime.rollout(TEXTS, n=2, seed=11, max_frames=24, min_frames=3, **sampling)
    trajectories = batch.trajectories(120)
    assert [(t.group_id, t.sample_id, t.seed) for t in trajectories] == [
        (g, i, sample_seed(11, g, i)) for g in range(2) for i in range(2)]
    for t in trajectories:
        assert t.logprobs.dtype == np.float32 and t.logprobs.shape == (len(t.codes), 13)
        assert np.all(t.logprobs[:3, 0] == 0.0)  # forced "continue" before min_frames
        assert t.audio is None and t.weight_version == runtime.weight_version
        check_exact(runtime.model, t)


@pytest.mark.exact
def test_same_seed_same_trajectory_alone_and_among_sixteen(runtime):
    (alone,) = runtime.rollout([TEXTS[0]], n=1, seed=77, max_frames=30).trajectories(120)
    crowd = [runtime.submit({"text": f"other request {i}", "seed": i, "max_frames": 30}) for i in range(16)]
    (inside,) = runtime.rollout([TEXTS[0]], n=1, seed=77, max_frames=30).trajectories(120)
    [h.result(120) for h in crowd]
    assert np.array_equal(alone.codes, inside.codes) and np.array_equal(alone.stop_decisions, inside.stop_decisions)
    np.testing.assert_allclose(alone.logprobs, inside.logprobs, atol=1e-5, rtol=0)


def test_a_group_shares_one_prefill_and_its_members_differ(runtime):
    before = runtime.stats()
    batch = runtime.rollout([TEXTS[1]], n=4, seed=5, max_frames=20)
    trajectories = list(batch)  # as they finish
    after = runtime.stats()
    prompt = len(trajectories[0].prompt_rows)
    cached = (after["prefix_cache_hits"] - before["prefix_cache_hits"]) * after["kv_block_size"]
    assert after["prefilled_rows"] - before["prefilled_rows"] == prompt - cached  # once, not 4 times
    assert after["shared_prefills"] - before["shared_prefills"] == 3
    assert after["kv_blocks_free"] == after["kv_blocks"]  # every shared block came back
    assert sorted(t.sample_id for t in trajectories) == [0, 1, 2, 3]
    assert len({t.codes.tobytes() for t in trajectories}) == 4
    for t in trajectories:
        check_exact(runtime.model, t)  # the shared prefix gives the same distributions as a real prefill


def test_decode_audio_off_skips_the_codec(runtime):
    before = runtime.stats()["kinds"]["audio_chunk"]["calls"]
    (t,) = runtime.rollout([TEXTS[0]], n=1, seed=1, max_frames=30).trajectories(60)
    assert runtime.stats()["kinds"]["audio_chunk"]["calls"] == before and t.audio is None
    (t,) = runtime.rollout([TEXTS[0]], n=1, seed=1, max_frames=30, decode_audio=True).trajectories(60)
    assert t.audio is not None and t.audio.shape[1] == len(t.codes) * 3840


def test_weight_update_changes_logprobs_and_version_and_wait_finishes_on_old_weights():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    try:
        (first,) = rt.rollout([TEXTS[0]], n=1, seed=3, max_frames=25, min_frames=25).trajectories(60)
        in_flight = rt.rollout([TEXTS[0]], n=1, seed=3, max_frames=200, min_frames=200)
        deadline = time.time() + 120  # a hang check
        while rt.stats()["running"] == 0:  # admitted before the update is asked for
            assert time.time() < deadline, rt.stats()
            time.sleep(0.001)
        old = {k: v.clone() for k, v in rt.model.named_parameters()}
        new = {"local_transformer.ln_f.weight": old["local_transformer.ln_f.weight"] * 1.5,
               "transformer.layers.0.mlp.gate_up_proj.weight": old["transformer.layers.0.mlp.gate_up_proj.weight"] * 0.5}
        rt.update_weights(new, version=1, mode="wait")  # returns once applied
        (finished,) = in_flight.trajectories(60)
        assert finished.weight_version == 0 and finished.finish_reason == "length"
        old_model = build_model(load_card())
        check_exact(old_model, finished)  # every frame of it came from the old weights
        assert rt.weight_version == 1
        (second,) = rt.rollout([TEXTS[0]], n=1, seed=3, max_frames=25, min_frames=25).trajectories(60)
        assert second.weight_version == 1 and not np.allclose(second.logprobs, first.logprobs)
        check_exact(rt.model, second)
        assert torch.equal(rt.model.local_transformer.ln_f.weight, new["local_transformer.ln_f.weight"])
    finally:
        rt.close()


def test_abort_mode_ends_requests_in_flight_and_bad_updates_change_nothing(tmp_path, monkeypatch):
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    try:
        slow_frames(rt.family.ar_loop, monkeypatch, 0.01)  # its 500 frames take >= 5 s: it runs when the update comes
        handle = rt.submit({"text": TEXTS[0], "max_frames": 500, "min_frames": 500, "stream": True})
        next(iter(handle))  # it is running (a request still waiting would start on the new weights instead)
        weight = rt.model.local_transformer.ln_f.weight
        rt.update_weights({"model.local_transformer.ln_f.weight": weight * 2}, version=7, mode="abort")
        assert handle.result(30).finish_reason == "abort" and rt.weight_version == 7
        before = weight.clone()
        with pytest.raises(WeightUpdateError, match=r"unknown \(1\): nope.*mis-shaped"):
            rt.update_weights({"nope": weight, "local_transformer.ln_f.bias": torch.zeros(3)}, version=8)
        assert torch.equal(weight, before) and rt.weight_version == 7
        from safetensors.torch import save_file
        save_file({"local_transformer.ln_f.weight": (weight * 3).contiguous()}, str(tmp_path / "model.safetensors"))
        rt.update_weights_from_disk(str(tmp_path), version=9)
        assert torch.equal(rt.model.local_transformer.ln_f.weight, before * 3) and rt.weight_version == 9
        qkv = rt.model.transformer.layers[1].self_attn.qkv_proj.weight
        k_rows = slice(64, 96)  # release key k_proj = rows 64..95 of the fused q/k/v projection (tiny card)
        rt.update_weights({"transformer.layers.1.self_attn.k_proj.weight": torch.ones(32, 64)}, version=10)
        assert torch.equal(qkv[k_rows], torch.ones(32, 64)) and not torch.equal(qkv[:64], torch.ones(64, 64))
    finally:
        rt.close()


def test_collate_pads_and_masks(runtime, tmp_path):
    trajectories = runtime.rollout(TEXTS, n=2, seed=20, max_frames=40).trajectories(60)
    batch = collate(trajectories)
    rows = [len(t.codes) + (t.stop_logprob is not None) for t in trajectories]
    assert batch["logprobs"].shape == (4, max(rows), 13) and batch["codes"].shape == (4, max(rows), 12)
    for i, t in enumerate(trajectories):
        f = len(t.codes)
        assert torch.equal(batch["codes"][i, :f], torch.from_numpy(t.codes))
        assert batch["mask"][i, :f].all() and not batch["mask"][i, rows[i]:].any()
        assert int(batch["lengths"][i]) == f and bool(batch["stopped"][i]) == (t.stop_logprob is not None)
        if t.stop_logprob is not None:
            assert batch["mask"][i, f].tolist() == [True] + [False] * 12
            assert float(batch["logprobs"][i, f, 0]) == pytest.approx(t.stop_logprob)
        assert float(batch["logprobs"][i][~batch["mask"][i]].abs().sum()) == 0
    write_jsonl(trajectories, tmp_path / "t.jsonl")
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[1])["sample_id"] == 1
    write_npz(trajectories, tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz") as z:
        assert z["logprobs"].shape == tuple(batch["logprobs"].shape) and list(z["seed"]) == [t.seed for t in trajectories]


def test_v2_rl_logprobs_recomputes_with_the_trajectorys_family(runtime):
    import dataclasses

    import v2.rl

    (t,) = runtime.rollout([TEXTS[0]], n=1, seed=3, max_frames=10, temperature=1.0).trajectories(60)
    assert t.family == runtime.card.family == "moss_tts_local" and t.to_dict()["family"] == t.family
    with torch.no_grad():
        assert torch.equal(v2.rl.logprobs(runtime.model, t), recompute(runtime.model, t))  # the family's own
    with pytest.raises(ValueError, match="^family: the trajectory's family 'no_such_family'"):
        v2.rl.logprobs(runtime.model, dataclasses.replace(t, family="no_such_family"))


def test_gradients_flow_through_the_recompute(runtime):
    (t,) = runtime.rollout([TEXTS[0]], n=1, seed=9, max_frames=12, temperature=1.0, top_k=20, top_p=0.9).trajectories(60)
    model = build_model(load_card())
    model.requires_grad_(True)
    out = logprobs(model, torch.from_numpy(t.prompt_rows), torch.from_numpy(t.codes), t.sampling,
                   final_stop=t.stop_logprob is not None)
    out.sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["local_transformer.h.0.attn.c_attn.weight"].abs().sum() > 0
    assert grads["transformer.layers.1.mlp.down_proj.weight"].abs().sum() > 0
    assert grads["audio_embeddings.3.weight"].abs().sum() > 0
    assert model.training is False  # recompute restores the mode it found
    torch.testing.assert_close(out.detach()[: len(t.codes)], torch.from_numpy(t.logprobs), atol=1e-5, rtol=0)


def test_bad_rollout_options_are_refused(runtime):
    with pytest.raises(TypeError, match="unknown option"):
        runtime.rollout(TEXTS, n=2, temprature=1.0)
    with pytest.raises(ValueError, match="n:"):
        runtime.rollout(TEXTS, n=0)
    with pytest.raises(ValueError, match="n: a group of 65"):
        runtime.rollout(TEXTS[:1], n=65)
    assert SamplingSettings()  # defaults still construct


@pytest.mark.exact
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), text=st.sampled_from(["logprob probe", TEXTS[0], "A third text, a little longer."]))
def test_the_recompute_equals_the_rollout_at_the_cards_default_sampling(runtime, seed, text):
    """At the card's defaults (stop 1.0 / 50 / 1.0; audio 1.7 / 25 / 0.8 together) the recompute once decided
    a top-p edge otherwise than the sampler (4.2e-2 at seed 9, frame 12): its logits came from another call
    shape. With call-invariant arithmetic the recompute's logits are the rollout's, so its candidate sets too."""
    import v2.rl

    for s in {seed, 9}:
        (t,) = runtime.rollout([text if s == seed else "logprob probe"], n=1, seed=s, max_frames=24).trajectories(120)
        with torch.no_grad():
            again = v2.rl.logprobs(runtime.model, t)
        f = len(t.codes)
        torch.testing.assert_close(again[:f], torch.from_numpy(t.logprobs), atol=1e-5, rtol=0)
        if t.stop_logprob is not None:
            assert abs(float(again[f, 0]) - t.stop_logprob) < 1e-5
