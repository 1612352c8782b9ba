"""Qwen3-TTS RL through the runtime: `rt.rollout` trajectories carry a logprob per sampled token of every
stage ([F, G]; group 0's distribution includes the stop id; a stopped run's EOS choice as the recompute's
extra row) and what the recompute needs, and the teacher-forced recompute gives the same logprobs.

Tolerance: the runtime's cached steps of a batch and the recompute's one causal pass give each row the same
bits (v2/models/exact.py: no sum depends on the call's shape), so both dtypes are held to 1e-5 (measured
0.0); the only gap left would be the rollout's float32 record of a float64 run."""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from v2.families.qwen3_tts.recompute import recompute, recorded, trajectory_logprobs
from v2.rl.trajectory import collate

from domain import head, penalty

from .conftest import CHECKPOINT, KEYS, request_of, wait_idle

SHARED = KEYS[:3]  # custom voice, custom voice with an instruction, voice design: groups of n share a prefill
CLONES = KEYS[3:]  # x-vector and in-context clones: a recording to encode is not shared, so n = 1


@pytest.fixture(scope="module")
def rt64() -> Iterator[Any]:
    from v2.runtime import Runtime

    rt = Runtime.from_card("qwen3_tts_tiny", checkpoint=str(CHECKPOINT), device="cpu", dtype=torch.float64)
    yield rt
    rt.close()


def _prompts(qmeta, qref, keys, **fields):
    return [request_of(qmeta, qref, k, **fields) for k in keys]


def _check(model: Any, trajectories: list[Any], atol: float) -> float:
    gap = 0.0
    with torch.no_grad():
        for t in trajectories:
            out = recompute(t, model)
            want = recorded(t)
            assert out.shape == want.shape == (len(t.codes) + int(t.stop_logprob is not None), model.num_code_groups)
            torch.testing.assert_close(out.float(), want, atol=atol, rtol=0)
            gap = max(gap, float((out.float() - want).abs().max()))
    return gap


@pytest.mark.exact
def test_rollout_equals_the_recompute_in_every_mode(rt64, qmeta, qref):
    before = rt64.stats()
    groups = rt64.rollout(_prompts(qmeta, qref, SHARED), n=3, seed=5, max_frames=20)
    clones = rt64.rollout(_prompts(qmeta, qref, CLONES), n=1, seed=5, max_frames=20, first_prompt_index=3)
    forced = rt64.rollout(_prompts(qmeta, qref, KEYS[:1]), n=2, seed=8, max_frames=6, min_frames=6,
                          temperature=0.6, top_k=7, repetition_penalty=1.2)
    trs = groups.trajectories(timeout=300) + clones.trajectories(timeout=300)
    extra = forced.trajectories(timeout=300)
    assert [t.group_id for t in trs] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4, 5]
    assert any(t.finish_reason == "stop" for t in trs)
    assert all(t.finish_reason == "length" and len(t.codes) == 6 and t.stop_logprob is None for t in extra)
    assert extra[0].sampling.talker.top_k == 7 and extra[0].sampling.repetition_penalty == 1.2
    for t in trs + extra:
        assert t.logprobs.shape == t.codes.shape == (len(t.codes), 16)
        assert t.stop_decisions.sum() == int(t.finish_reason == "stop") == int(t.stop_logprob is not None)
        assert t.trailing is not None and t.trailing.dtype == np.int64 and len(t.trailing) >= 1
        assert (t.speaker_vector is not None) == (t.group_id >= 3 and t.seed not in {x.seed for x in extra})
        assert np.all(t.logprobs <= 0) and np.any(t.logprobs < 0)
    _check(rt64.family.model, trs + extra, atol=1e-5)
    # one prefill per shared group: the 2 other members of each of the 3 groups, and 1 for the forced pair
    assert rt64.stats()["shared_prefills"] - before["shared_prefills"] == 3 * 2 + 1
    wait_idle(rt64)


def test_the_recompute_reads_every_input_it_is_given(rt64, qmeta, qref):
    """The x-vector, the trailing text and the floor each change the recomputed logprobs (so each is read)."""
    (t,) = rt64.rollout(_prompts(qmeta, qref, ["xv"]), n=1, seed=2, max_frames=8, min_frames=4).trajectories(300)
    from dataclasses import replace

    model, want = rt64.family.model, recorded(t)
    with torch.no_grad():
        torch.testing.assert_close(trajectory_logprobs(model, t).float(), want, atol=1e-5, rtol=0)
        for changed in (replace(t, speaker_vector=np.zeros_like(t.speaker_vector)),
                        replace(t, trailing=t.trailing[::-1].copy()), replace(t, min_frames=0)):
            assert not torch.allclose(recompute(changed, model).float(), want, atol=1e-4)


@pytest.mark.exact
def test_a_rollout_member_batched_equals_it_alone(rt64, qmeta, qref):
    """Each member of a shared-prefill group, batched with the others, has the codes and logprobs it has alone."""
    prompts = _prompts(qmeta, qref, ["cv", "vd"])
    trs = rt64.rollout(prompts, n=3, seed=11, max_frames=12).trajectories(timeout=300)
    for t in trs:
        alone = rt64.submit({**prompts[t.group_id], "seed": t.seed, "profile": "rollout", "decode_audio": False,
                             "stream": False, "max_frames": 12}).result(timeout=300).trajectory
        assert np.array_equal(alone.codes, t.codes) and alone.finish_reason == t.finish_reason
        np.testing.assert_allclose(alone.logprobs, t.logprobs, atol=1e-6, rtol=0)
        assert alone.stop_logprob == pytest.approx(t.stop_logprob, abs=1e-6) if t.stop_logprob else alone.stop_logprob is None
        assert np.array_equal(alone.prompt_rows, t.prompt_rows) and np.array_equal(alone.trailing, t.trailing)
    assert len({tuple(map(tuple, t.codes)) for t in trs}) > 2  # the members drew their own samples
    wait_idle(rt64)


@pytest.mark.exact
def test_float32_rollout_equals_the_recompute(qrt, qmeta, qref):
    trs = qrt.rollout(_prompts(qmeta, qref, SHARED), n=2, seed=5, max_frames=20).trajectories(timeout=300)
    trs += qrt.rollout(_prompts(qmeta, qref, CLONES), n=1, seed=5, max_frames=20).trajectories(timeout=300)
    _check(qrt.family.model, trs, atol=1e-5)
    wait_idle(qrt)


@pytest.mark.exact
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(KEYS), talker=head, subtalker=head, rep=penalty, seed=st.integers(0, 2**32),
       min_frames=st.integers(0, 6), flat=st.booleans())
def test_the_whole_accepted_domain_per_head_gives_exact_logprobs(qrt, qmeta, qref, key, talker, subtalker, rep, seed,
                                                                   min_frames, flat):
    """Each head's settings drawn on its own over the accepted domain (greedy, the edges, a top-p of 1e-30),
    the repetition penalty and the floor too, given as the talker's flat knobs or as `audio`."""
    talker_options = talker if flat else {"audio": talker}
    (t,) = qrt.rollout(_prompts(qmeta, qref, [key]), n=1, seed=seed, max_frames=10, min_frames=min_frames,
                       subtalker=subtalker, repetition_penalty=rep, **talker_options).trajectories(timeout=300)
    assert t.sampling.talker.top_k == talker["top_k"] and t.sampling.subtalker.top_p == subtalker["top_p"]
    assert np.isfinite(t.logprobs).all() and (t.logprobs <= 0).all()
    assert len(t.codes) >= min_frames or t.finish_reason == "length"
    _check(qrt.family.model, [t], atol=1e-5)


def test_trajectories_collate_and_export(rt64, qmeta, qref):
    trs = rt64.rollout(_prompts(qmeta, qref, ["cv"]), n=2, seed=3, max_frames=10).trajectories(timeout=300)
    batch = collate(trs)
    assert batch["logprobs"].shape[2] == batch["mask"].shape[2] == 16  # G columns: the stop is group 0's id
    for i, t in enumerate(trs):
        rows = len(t.codes) + int(t.stop_logprob is not None)
        torch.testing.assert_close(batch["logprobs"][i, :rows], recorded(t))
        assert batch["mask"][i, :len(t.codes)].all() and not batch["mask"][i, rows:].any()
    d = json.loads(json.dumps(trs[0].to_dict()))
    assert d["trailing"] == trs[0].trailing.tolist() and d["speaker_vector"] is None
