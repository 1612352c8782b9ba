"""RL on Qwen3-Omni: a rollout's trajectory holds the thinker's token logprobs and the talker's per-codebook
logprobs (group 0 and the code predictor's 15), and `v2.rl.logprobs` recomputes them teacher-forced (one causal
thinker pass, the talker's prompt from it, one talker pass, the code predictor per frame) within 1e-4."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.families.qwen3_omni.conftest import request
from v2.families.qwen3_omni.recompute import recorded
from v2.families.qwen3_omni.results import OmniTrajectory
from v2.rl.recompute import logprobs
from v2.runtime import Runtime

pytestmark = pytest.mark.exact


@pytest.mark.parametrize("key", ["a", "c"])
def test_rollout_equals_recompute(rt: Runtime, fixture: tuple[dict, dict], key: str) -> None:
    ref, meta = fixture
    r = rt.submit(request(ref, meta, key, profile="rollout", seed=11, temperature=0.9, top_k=40, top_p=0.95,
                          talker_temperature=0.9)).result()
    t = r.trajectory
    assert isinstance(t, OmniTrajectory) and r.error is None
    assert t.text_logprobs is not None and len(t.text_logprobs) == len(r.text_ids or ())
    assert t.logprobs.shape == (len(r.codes), 16) and (t.logprobs < 0).any()
    with torch.no_grad():
        again = logprobs(rt.family.weights, t)
    want = recorded(t)
    torch.testing.assert_close(again.thinker, want.thinker, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(again.talker, want.talker, atol=1e-4, rtol=1e-4)


def test_greedy_rollout_scores_point_masses(rt: Runtime, fixture: tuple[dict, dict]) -> None:
    ref, meta = fixture
    t = rt.submit(request(ref, meta, "b", profile="rollout")).result().trajectory
    assert isinstance(t, OmniTrajectory)
    np.testing.assert_array_equal(t.text_logprobs, 0.0)
    with torch.no_grad():
        again = logprobs(rt.family.weights, t)
    torch.testing.assert_close(again.thinker, recorded(t).thinker)
    torch.testing.assert_close(again.talker, recorded(t).talker, atol=1e-4, rtol=1e-4)
