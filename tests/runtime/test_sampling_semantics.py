"""The reference implementation's sampling semantics: a top-level temperature / top_k / top_p is the audio
head's; every sample of a rollout has its own seed, recorded, that reproduces it alone."""

from __future__ import annotations

import numpy as np
import pytest

from v2.runtime import Runtime
from v2.rl.batch import sample_seed

TEXTS = ["First prompt of the rollout.", "Second prompt, other words."]


@pytest.fixture(scope="module")
def runtime():
    rt = Runtime.from_card("moss_tts_local_tiny", device="cpu")
    yield rt
    rt.close()


def test_top_level_settings_are_the_audio_heads_and_the_stop_head_keeps_its_own(runtime):
    defaults = runtime.card.loops.ar_decode.sampling.settings()
    (t,) = runtime.rollout([TEXTS[0]], n=1, seed=1, max_frames=4, temperature=0.5, top_k=7, top_p=0.3).trajectories(60)
    assert t.sampling.stop == defaults.stop  # a top-level top_p can no longer remove "stop"
    assert (t.sampling.audio.temperature, t.sampling.audio.top_k, t.sampling.audio.top_p) == (0.5, 7, 0.3)
    (u,) = runtime.rollout([TEXTS[0]], n=1, seed=1, max_frames=4, top_p=0.3,
                           stop={"top_p": 0.9}, audio={"top_k": 3}).trajectories(60)
    assert (u.sampling.stop.top_p, u.sampling.stop.top_k) == (0.9, defaults.stop.top_k)
    assert (u.sampling.audio.top_p, u.sampling.audio.top_k) == (0.3, 3)  # the head's own field wins


def test_every_sample_of_a_rollout_has_its_own_recorded_seed_that_reproduces_it(runtime):
    batch = runtime.rollout(TEXTS, n=3, seed=5, max_frames=8, min_frames=8).trajectories(120)
    seeds = [t.seed for t in batch]
    assert seeds == [sample_seed(5, g, i) for g in range(2) for i in range(3)] and len(set(seeds)) == 6
    assert all(0 <= s < 2**63 for s in seeds)
    alone = runtime.submit({"text": TEXTS[1], "seed": batch[4].seed, "max_frames": 8, "min_frames": 8,
                            "profile": "rollout", "decode_audio": False}).result(60).trajectory
    assert np.array_equal(alone.codes, batch[4].codes)  # logprobs: within float noise of a different batch
    np.testing.assert_allclose(alone.logprobs, batch[4].logprobs, atol=1e-5, rtol=0)


def test_a_rollout_split_across_runtimes_gets_the_same_seeds_and_groups(runtime):
    whole = runtime.rollout(TEXTS, n=2, seed=9, max_frames=6, min_frames=6).trajectories(120)
    part = runtime.rollout(TEXTS[1:], n=2, seed=9, max_frames=6, min_frames=6, first_prompt_index=1).trajectories(120)
    for a, b in zip(whole[2:], part):
        assert (a.group_id, a.sample_id, a.seed) == (b.group_id, b.sample_id, b.seed)
        assert np.array_equal(a.codes, b.codes)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)


def test_sample_seeds_do_not_collide_over_many_prompts_and_samples():
    seeds = {sample_seed(s, g, i) for s in range(4) for g in range(64) for i in range(16)}
    assert len(seeds) == 4 * 64 * 16
