"""The thinker batched == alone, bit for bit on the CPU: four prompts of different lengths (one with audio)
prefilled together right-padded into a KVCache, then decoded one token a step together; every hidden row and
logit equals that prompt's own run (its rows route to other experts than its neighbours')."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import KEYS
from tests.models.qwen3_omni.test_thinker_parity import prompt_rows
from v2.models.kv_cache import KVCache
from v2.models.qwen3_omni.moe import route
from v2.models.qwen3_omni.thinker import Thinker

STEPS = 3


@torch.no_grad()
def run(thinker: Thinker, prompts: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(final-norm rows [T + STEPS - 1... ], logits of the last row per step) per prompt, all in one batch."""
    b, longest = len(prompts), max(p.shape[0] for p in prompts)
    h = prompts[0].shape[1]
    cache = KVCache.allocate(thinker.cfg.text.decoder, b, longest + STEPS, dtype=torch.float32, device="cpu")
    x = torch.zeros(b, longest, h)
    valid = torch.zeros(b, longest, dtype=torch.bool)
    for i, p in enumerate(prompts):
        x[i, : p.shape[0]], valid[i, : p.shape[0]] = p, True
    slots, pos = torch.arange(b), torch.arange(longest).expand(b, longest)
    out = thinker.model.forward_cached(x, cache, slots, pos, valid=valid)  # [B, T, H]
    rows = [[out[i, : p.shape[0]]] for i, p in enumerate(prompts)]
    last = torch.stack([out[i, p.shape[0] - 1] for i, p in enumerate(prompts)])  # [B, H]
    logits = [[thinker.logits(last)]]
    lengths = torch.tensor([p.shape[0] for p in prompts])
    for s in range(STEPS - 1):
        tokens = logits[-1][0].argmax(-1)  # [B]
        step = thinker.model.forward_cached(thinker.model.embed_tokens(tokens)[:, None], cache, slots,
                                            (lengths + s)[:, None])  # [B, 1, H]
        for i in range(b):
            rows[i].append(step[i])
        logits.append([thinker.logits(step[:, 0])])
    return [(torch.cat(rows[i]), torch.stack([lg[0][i] for lg in logits])) for i in range(b)]


@pytest.mark.exact
def test_thinker_batched_equals_alone(thinker: Thinker, oref: dict[str, np.ndarray]) -> None:
    prompts = [prompt_rows(thinker, oref, k) for k in KEYS]
    with torch.no_grad():  # the draw routes rows differently: prompts' first layer top-k sets differ
        mlp = thinker.model.layers[0].mlp
        picks = {tuple(sorted(r)) for p in prompts for r in route(mlp.gate(p), 2, True)[1].tolist()}
        assert len(picks) > 4
    together = run(thinker, prompts)
    for i, key in enumerate(KEYS):
        alone = run(thinker, [prompts[i]])[0]
        assert torch.equal(together[i][0], alone[0]), key
        assert torch.equal(together[i][1], alone[1]), key
    reordered = run(thinker, prompts[::-1])
    for i in range(len(KEYS)):
        assert torch.equal(reordered[len(KEYS) - 1 - i][1], together[i][1])
