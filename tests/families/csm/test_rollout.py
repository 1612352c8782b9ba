"""RL on the CSM family: a rollout's per-codebook logprobs (codebook 0 under the backbone's head, codebooks
1..N-1 under the depth decoder's) equal the teacher-forced recompute `v2.rl.logprobs` finds through the
registry (this family's `recompute.trajectory_logprobs`), sampled and greedy, with a stop frame and without;
the recompute is differentiable; a group shares one prefill."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import v2.rl
from v2.families.csm.recompute import recorded

from .conftest import request_of

pytestmark = pytest.mark.exact
ATOL = 1e-4  # a cached decode against one causal pass: logits reach |32|, each stage rounds on its own


@pytest.fixture(scope="module")
def rollout(crt, cref):
    prompts = [request_of(cref, k) for k in ("s0", "ctx")]
    prompts[1].pop("context")  # a group shares its prompt: no recording to encode
    prompts[1]["context"] = [{"text_ids": [58, 15, 60, 40], "codes": cref["ctx_context_codes"]}]
    batch = crt.rollout(prompts, n=3, seed=4, max_frames=10)
    return batch.trajectories()


def test_rollout_equals_recompute(crt, rollout):
    assert {t.family for t in rollout} == {"csm"} and len(rollout) == 6
    assert any(t.finish_reason == "stop" for t in rollout)
    for t in rollout:
        with torch.no_grad():
            again = v2.rl.logprobs(crt.model, t)
        assert again.shape == (len(t.codes), 32)
        np.testing.assert_allclose(again.numpy(), recorded(t).numpy(), atol=ATOL, rtol=0)
        assert t.stop_decisions.tolist() == [i == len(t.codes) - 1 and t.finish_reason == "stop"
                                             for i in range(len(t.codes))]


def test_greedy_rollout_equals_recompute(crt, cref):
    t = crt.submit(request_of(cref, "ctx", max_frames=8, temperature=0.0, profile="rollout")).result().trajectory
    with torch.no_grad():
        again = v2.rl.logprobs(crt.model, t)
    np.testing.assert_allclose(again.numpy(), cref["ctx_gen_logprobs"], atol=ATOL, rtol=0)


def test_recompute_is_differentiable(crt, rollout):
    """A trainer's policy: its heads require grad; the recompute's graph reaches both stages."""
    t, model = rollout[0], crt.model
    params = [model.lm_head.weight, model.depth_decoder.codebooks_head.weight]
    try:
        for p in params:
            p.requires_grad_(True)
        v2.rl.logprobs(model, t).sum().backward()
        assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params)
    finally:
        for p in params:
            p.requires_grad_(False)
            p.grad = None
